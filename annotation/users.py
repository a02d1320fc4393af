"""Users, roles and passwords. Passwords are stored as argon2id hashes
(argon2-cffi's defaults: RFC 9106's low-memory profile). Hashes of an older
scheme (salted scrypt, `scrypt$N$r$p$salt$digest`) or older argon2 parameters
still verify, and are rewritten with the current scheme at the user's next
successful login.

A verified login is remembered in memory (as a keyed digest, never in clear)
for `VERIFIED_TTL_S` seconds, so that HTTP Basic auth pays no hashing on every
request; it holds only while the user's `credential_stamp` (their hash and
active flag, itself cached `STAMP_TTL_S` seconds) is unchanged, so a password
change or a disabled account ends it within that time in every process, and
at once in the process that made the change. Unknown or disabled users are
checked against a dummy hash, so that their answer takes as long as a known
user's. At most `HASHING_AT_ONCE` verifications run at a time: each takes
argon2's 64 MiB and a core's worth of CPU, and a flood of logins must not take
them all."""
from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import secrets
import threading
import time
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError

from capscope.annotation import audit
from capscope.annotation.refusals import Conflict, Invalid, NotFound
from capscope.db import Dataset, Store, User
from capscope.db.models import ROLES

log = logging.getLogger(__name__)

MIN_PASSWORD_CHARS = 12
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
VERIFIED_TTL_S = 60
STAMP_TTL_S = 2.0
HASHING_AT_ONCE = 2
_CACHE_ENTRIES = 4096
_PEPPER = secrets.token_bytes(32)  # per process: cached digests are useless elsewhere
_hasher = PasswordHasher()
_hashing = threading.BoundedSemaphore(HASHING_AT_ONCE)
_verified: dict[tuple[str, str, bytes], tuple[UserInfo, str, float]] = {}
_stamps: dict[tuple[str, str], tuple[str | None, float]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class UserInfo:
    id: int
    name: str
    role: str
    active: bool = True

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password: str, stored: str) -> bool:
    """Whether `password` matches `stored`, an argon2 hash or an older scrypt one."""
    if stored.startswith("$argon2"):
        try:
            return _hasher.verify(stored, password)
        except (VerificationError, InvalidHashError):
            return False
    return _verify_scrypt(password, stored)


def _verify_scrypt(password: str, stored: str) -> bool:
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


def needs_rehash(stored: str) -> bool:
    """Whether a verified hash should be rewritten: another scheme, or argon2 parameters older than ours."""
    if not stored.startswith("$argon2"):
        return True
    try:
        return _hasher.check_needs_rehash(stored)
    except (InvalidHashError, ValueError):
        return True


@functools.cache
def _dummy_hash() -> str:
    """What unknown names are checked against; made on first use, not at import (it costs a hash)."""
    return hash_password(secrets.token_urlsafe(16))


def _check_new_user(name: str, password: str, role: str) -> None:
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not name or len(name) > 100 or any(c.isspace() or c == ":" for c in name):
        raise Invalid("user name must be 1-100 characters without spaces or ':'")
    if len(password) < MIN_PASSWORD_CHARS:
        raise Invalid(f"password must have at least {MIN_PASSWORD_CHARS} characters")


def add_user(store: Store, name: str, password: str, role: str = "annotator", *, replace: bool = False) -> UserInfo:
    """Create a user (or, with `replace`, set an existing user's password and role, and enable them)."""
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
            old_role = user.role
            user.role, user.password_hash, user.active = role, hashed, True
            user.session_version += 1
            audit.record_in(session, "user replaced", target=name, details={"role": role, "role before": old_role})
            if role != old_role:
                audit.record_in(session, "role changed", target=name, details={"from": old_role, "to": role})
        if user.id is None:
            session.flush()
            audit.record_in(session, "user added", target=name, details={"role": role})
        session.flush()
        return UserInfo(user.id, user.name, user.role)

    info = store.run_write(work)
    _forget(name)
    return info


def set_active(store: Store, name: str, active: bool) -> UserInfo:
    """Enable or disable a user. A disabled user keeps their labels but cannot sign in,
    and their remembered logins and UI sessions end."""

    def work(session):
        user = session.scalar(select(User).where(User.name == name).with_for_update())
        if user is None:
            raise NotFound(f"no user {name!r}")
        user.active = active
        user.session_version += 1  # a session issued before never comes back, not even after an enable
        audit.record_in(session, "user enabled" if active else "user disabled", target=name)
        session.flush()
        return UserInfo(user.id, user.name, user.role, user.active)

    info = store.run_write(work)
    _forget(name)
    return info


def list_users(store: Store, *, include_disabled: bool = False) -> list[UserInfo]:
    query = select(User).order_by(User.name)
    if not include_disabled:
        query = query.where(User.active)
    with store.read() as session:
        return [UserInfo(u.id, u.name, u.role, bool(u.active)) for u in session.scalars(query)]


def get_user(store: Store, name: str) -> UserInfo:
    with store.read() as session:
        user = session.scalar(select(User).where(User.name == name, User.active))
        if user is None:
            raise NotFound(f"no user {name!r}")
        return UserInfo(user.id, user.name, user.role)


def credential_stamp(store: Store, name: str) -> str | None:
    """A digest of the user's password hash, active flag and session version (None: no such user), cached
    `STAMP_TTL_S` seconds: a session or a remembered login holds while it is unchanged."""
    key, now = (store.url, name), time.monotonic()
    with _cache_lock:
        cached = _stamps.get(key)
    if cached and cached[1] > now:
        return cached[0]
    with store.read() as session:
        row = session.execute(select(User.password_hash, User.active, User.session_version)
                              .where(User.name == name)).first()
    stamp = None if row is None else hmac.new(_PEPPER, f"{bool(row.active)}:{row.session_version}:"
                                                       f"{row.password_hash}".encode(),
                                              "sha256").hexdigest()
    with _cache_lock:
        _bounded(_stamps)[key] = (stamp, now + STAMP_TTL_S)
    return stamp


def authenticate(store: Store, name: str, password: str) -> UserInfo | None:
    """The active user with this name and password, or None."""
    key = (store.url, name, hmac.digest(_PEPPER, password.encode(), "sha256"))
    remembered = _remembered(store, key)
    if remembered:
        return remembered
    with store.read() as session:
        user = session.scalar(select(User).where(User.name == name, User.active))
        found = (UserInfo(user.id, user.name, user.role), user.password_hash) if user else None
    if found is None:
        _verify_limited(password, _dummy_hash())
        return None
    info, stored = found
    if not _verify_limited(password, stored):
        return None
    if needs_rehash(stored):
        _rehash(store, info, stored, password)
    stamp = credential_stamp(store, name)
    with _cache_lock:
        _bounded(_verified)[key] = (info, stamp, time.monotonic() + VERIFIED_TTL_S)
    return info


def _remembered(store: Store, key: tuple[str, str, bytes]) -> UserInfo | None:
    with _cache_lock:
        cached = _verified.get(key)
    if not cached or cached[2] <= time.monotonic():
        return None
    info, stamp, _ = cached
    if stamp is not None and credential_stamp(store, info.name) == stamp:
        return info
    _forget(info.name)
    return None


def _verify_limited(password: str, stored: str) -> bool:
    with _hashing:
        return verify_password(password, stored)


def _rehash(store: Store, info: UserInfo, stored: str, password: str) -> None:
    """Rewrite a verified old-scheme hash; only if it is still the stored one (no change meanwhile).
    A failure is logged, not raised: the login itself has succeeded."""
    with _hashing:
        fresh = hash_password(password)
    statement = (update(User).where(User.id == info.id, User.password_hash == stored)
                 .values(password_hash=fresh))
    try:
        store.run_write(lambda session: session.execute(statement))
    except SQLAlchemyError as err:
        log.warning("could not upgrade the password hash of %s: %s", info.name, err)
        return
    _forget(info.name)


def _bounded(cache: dict) -> dict:
    """The cache, emptied first when full: a flood of names must not grow it without end."""
    if len(cache) >= _CACHE_ENTRIES:
        cache.clear()
    return cache


def _forget(name: str) -> None:
    with _cache_lock:
        for key in [k for k in _verified if k[1] == name]:
            del _verified[key]
        for key in [k for k in _stamps if k[1] == name]:
            del _stamps[key]


def annotate_dataset(store: Store, user: UserInfo) -> str | None:
    """The dataset this user chose to annotate (None: every dataset; a dataset since removed: None)."""
    with store.read() as session:
        chosen = session.scalar(select(User.annotate_dataset).where(User.id == user.id))
        if chosen is None or session.scalar(select(Dataset.id).where(Dataset.name == chosen)) is None:
            return None
        return chosen


def set_annotate_dataset(store: Store, user: UserInfo, dataset: str | None) -> str | None:
    """Remember the dataset this user annotates (None: every dataset, the demo dataset last)."""
    def work(session):
        if dataset is not None and session.scalar(select(Dataset.id).where(Dataset.name == dataset)) is None:
            raise NotFound(f"no dataset {dataset!r}")
        session.get(User, user.id).annotate_dataset = dataset
        return dataset

    return store.run_write(work)
