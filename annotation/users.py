"""Users, roles and passwords. Passwords are stored as salted scrypt hashes.
A verified login is remembered in memory (as a keyed digest, never in clear)
for `VERIFIED_TTL_S` seconds, so that HTTP Basic auth pays neither scrypt nor
a database query on every request; `add_user` forgets a changed user at once,
other processes see a change within that time."""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from sqlalchemy import select

from capscope.annotation.errors import Conflict, Invalid, NotFound
from capscope.db import Store, User
from capscope.db.models import ROLES

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
VERIFIED_TTL_S = 60
_PEPPER = secrets.token_bytes(32)  # per process: cached digests are useless elsewhere
_verified: dict[tuple[str, str, bytes], tuple[UserInfo, float]] = {}
_verified_lock = threading.Lock()


@dataclass(frozen=True)
class UserInfo:
    id: int
    name: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    b64 = lambda raw: base64.b64encode(raw).decode("ascii")  # noqa: E731
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt)}${b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(
            password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), dklen=len(expected)
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


def _check_new_user(name: str, password: str, role: str) -> None:
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not name or len(name) > 100 or any(c.isspace() or c == ":" for c in name):
        raise Invalid("user name must be 1-100 characters without spaces or ':'")
    if len(password) < 4:
        raise Invalid("password must have at least 4 characters")


def add_user(store: Store, name: str, password: str, role: str = "annotator", *, replace: bool = False) -> UserInfo:
    """Create a user (or, with `replace`, set an existing user's password and role)."""
    _check_new_user(name, password, role)
    hashed = hash_password(password)

    def work(session):
        user = session.scalar(select(User).where(User.name == name).with_for_update())
        if user is not None and not replace:
            raise Conflict(f"user {name!r} already exists")
        if user is None:
            user = User(name=name, role=role, password_hash=hashed)
            session.add(user)
        else:
            user.role, user.password_hash, user.active = role, hashed, True
        session.flush()
        return UserInfo(user.id, user.name, user.role)

    info = store.run_write(work)
    _forget(name)
    return info


def list_users(store: Store) -> list[UserInfo]:
    with store.read() as session:
        users = session.scalars(select(User).where(User.active).order_by(User.name))
        return [UserInfo(u.id, u.name, u.role) for u in users]


def get_user(store: Store, name: str) -> UserInfo:
    with store.read() as session:
        user = session.scalar(select(User).where(User.name == name, User.active))
        if user is None:
            raise NotFound(f"no user {name!r}")
        return UserInfo(user.id, user.name, user.role)


def authenticate(store: Store, name: str, password: str) -> UserInfo | None:
    """The active user with this name and password, or None."""
    key = (store.url, name, hmac.digest(_PEPPER, password.encode(), "sha256"))
    now = time.monotonic()
    with _verified_lock:
        cached = _verified.get(key)
    if cached and cached[1] > now:
        return cached[0]
    with store.read() as session:
        user = session.scalar(select(User).where(User.name == name, User.active))
        if user is None:
            return None
        info, stored = UserInfo(user.id, user.name, user.role), user.password_hash
    if not verify_password(password, stored):
        return None
    with _verified_lock:
        if len(_verified) > 4096:
            _verified.clear()
        _verified[key] = (info, now + VERIFIED_TTL_S)
    return info


def _forget(name: str) -> None:
    with _verified_lock:
        for key in [k for k in _verified if k[1] == name]:
            del _verified[key]
