"""Guessing passwords against the server: back-off, and the UI's sign-in.

`SignInGuard` counts failed sign-ins per user name at a client address, and
per client address. After `limit` failures within `window_s` for either,
attempts for it are refused without a password check for `first_backoff_s`;
each failure after that backs off twice as long as the one before, up to
`max_backoff_s`, until `window_s` passes without a failure or a back-off. A
success clears the name's count at that address (not the address's: one's own
account must not wash out guesses at others'). A name is never counted alone:
whoever guesses at a name from one address cannot lock its owner out at
another. A browser that has signed in as a name before carries a known-device
cookie for it (HttpOnly, signed with a key of this process): its attempts for
that name count on their own, so guesses from its address, a shared one
behind a NAT included, do not lock that browser out (the way in for an
admin). Behind a proxy the address is the client's own
(`capscope serve --trusted-proxy`). The REST API (HTTP Basic) and the UI's
login form share an app's one guard (`guard_for(app)`), so failures on either
count for both.

The UI's login runs the password check in a worker thread, at most
`UI_HASHING_AT_ONCE` at a time (waiting on the event loop, not in a thread),
so that hashing never stalls the server's other requests. Gradio does not
hand its login function the request: `ClientAddress`, an ASGI middleware,
puts each request's client address where `ui_auth`'s function reads it.
"""
from __future__ import annotations

import contextvars
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

import anyio

from capscope.annotation import audit
from capscope.annotation.users import authenticate
from capscope.server.callers import cookie_pairs
from capscope.db import Store

UI_HASHING_AT_ONCE = 2
DEVICE_COOKIE = "capscope-device"
DEVICE_DAYS = 180
_DEVICE_KEY = secrets.token_bytes(32)  # per process: after a restart a known device counts as any other
client_address: contextvars.ContextVar[str] = contextvars.ContextVar("capscope_client_address", default="")
login_request: contextvars.ContextVar["LoginRequest | None"] = contextvars.ContextVar("capscope_login",
                                                                                       default=None)
_guards_made = threading.Lock()


@dataclass
class _Record:
    failures: deque[float]
    blocked_until: float = 0.0
    backoffs: int = 0


@dataclass
class SignInGuard:
    """Failed sign-ins per name and per address (see the module's docstring); thread-safe,
    at most `max_entries` records (the least recently seen go first)."""

    limit: int = 5
    window_s: float = 15 * 60
    first_backoff_s: float = 1.0
    max_backoff_s: float = 15 * 60
    max_entries: int = 20_000
    clock: Callable[[], float] = time.monotonic
    _records: OrderedDict[tuple[str, str], _Record] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def retry_after(self, name: str, address: str, known_device: bool = False) -> float:
        """Seconds until attempts for this name and address are checked again; 0: now.
        `known_device`: the attempt comes from a browser that signed in as `name` before."""
        now = self.clock()
        with self._lock:
            waits = [self._record(key, now) for key in self._keys(name, address, known_device)]
        return max((r.blocked_until - now for r in waits if r and r.blocked_until > now), default=0.0)

    def failed(self, name: str, address: str, known_device: bool = False) -> None:
        now = self.clock()
        with self._lock:
            for key in self._keys(name, address, known_device):
                record = self._record(key, now) or self._add(key)
                record.failures.append(now)
                if record.backoffs or (len(record.failures) == self.limit
                                       and record.failures[0] > now - self.window_s):
                    doubled = self.first_backoff_s * 2 ** min(record.backoffs, 40)
                    record.blocked_until = now + min(doubled, self.max_backoff_s)
                    record.backoffs += 1

    def succeeded(self, name: str, address: str, known_device: bool = False) -> None:
        with self._lock:
            self._records.pop(self._keys(name, address, known_device)[0], None)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        return len(self._records)

    @staticmethod
    def _keys(name: str, address: str, known_device: bool = False) -> tuple[tuple[str, str], ...]:
        if known_device:
            return (("name on a known device", name[:200]),)
        return ("name at address", f"{name[:200]}\n{address}"), ("address", address)

    def _record(self, key: tuple[str, str], now: float) -> _Record | None:
        """The key's record, or None once a window has passed since its last failure or back-off."""
        record = self._records.get(key)
        if record is None:
            return None
        if now - max(record.blocked_until, record.failures[-1] if record.failures else 0.0) > self.window_s:
            del self._records[key]
            return None
        self._records.move_to_end(key)
        return record

    def _add(self, key: tuple[str, str]) -> _Record:
        """A new record; the least recently seen go first when there are `max_entries`."""
        while len(self._records) >= self.max_entries:
            self._records.popitem(last=False)
        record = self._records[key] = _Record(deque(maxlen=self.limit))
        return record


SIGNIN_LOG_EVERY_S = 15 * 60


def signin_log_due(app, name: str, address: str, clock: Callable[[], float] = time.monotonic) -> bool:
    """Whether a REST sign-in goes on the audit log: a script sends its password with every
    request, so its sign-ins are recorded once a name and address per `SIGNIN_LOG_EVERY_S`."""
    with _guards_made:
        seen = getattr(app.state, "signins_logged", None)
        if seen is None:
            seen = app.state.signins_logged = OrderedDict()
        now, key = clock(), (name[:200], address)
        if key in seen and now - seen[key] < SIGNIN_LOG_EVERY_S:
            return False
        seen[key] = now
        seen.move_to_end(key)
        while len(seen) > 20_000:
            seen.popitem(last=False)
        return True


def guard_for(app) -> SignInGuard:
    """The app's one guard (made on first use), shared by the REST API and the UI mounted on it."""
    guard = getattr(app.state, "signin_guard", None)
    if guard is None:
        with _guards_made:
            guard = getattr(app.state, "signin_guard", None)
            if guard is None:
                guard = app.state.signin_guard = SignInGuard()
    return guard


@dataclass
class LoginRequest:
    """What the UI's login function learns of the request it answers (Gradio hands it none)."""
    address: str
    device: str | None  # the known-device cookie sent, if any
    signed_in: str | None = None  # the name, once the login succeeded: its answer sets the cookie


def device_mark(name: str) -> str:
    """The known-device cookie's value for a browser that signed in as `name`."""
    return hmac.new(_DEVICE_KEY, name.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


class ClientAddress:
    """ASGI middleware: the request's client address and known-device cookie, for the UI's
    login function to read; a successful login's answer sets the cookie."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        client = scope.get("client")
        address = client[0] if client else ""
        client_address.set(address)
        request = LoginRequest(address, _cookie(scope, DEVICE_COOKIE))
        login_request.set(request)

        async def send_marking(message):
            if message["type"] == "http.response.start" and request.signed_in:
                secure = "; Secure" if scope.get("scheme") == "https" else ""
                cookie = (f"{DEVICE_COOKIE}={device_mark(request.signed_in)}; Max-Age={DEVICE_DAYS * 86400}; "
                          f"Path=/; HttpOnly; SameSite=Strict{secure}")
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode())]}
            await send(message)

        await self.app(scope, receive, send_marking)


def _cookie(scope, wanted: str) -> str | None:
    headers = (value.decode("latin-1") for name, value in scope.get("headers", []) if name == b"cookie")
    return next((found for header in headers for key, found in cookie_pairs(header) if key == wanted), None)


def ui_auth(app, store: Store):
    """Gradio's `auth` callable for the UI mounted on `app`: an `async def` (Gradio awaits
    it on the event loop) whose hashing runs in a worker thread."""
    slots = anyio.Semaphore(UI_HASHING_AT_ONCE)

    async def login(name: str, password: str) -> bool:
        guard, address, request = guard_for(app), client_address.get(), login_request.get()
        known = bool(request and request.device and request.device.isascii()
                     and hmac.compare_digest(request.device, device_mark(name)))
        if guard.retry_after(name, address, known):
            return False
        async with slots:
            user = await anyio.to_thread.run_sync(authenticate, store, name, password)
        if user is None:
            guard.failed(name, address, known)
            await anyio.to_thread.run_sync(lambda: audit.record(store, "sign-in failed", actor=name, address=address,
                                                                 details={"by": "web UI"}))
            return False
        guard.succeeded(name, address, known)
        await anyio.to_thread.run_sync(lambda: audit.record(store, "sign-in", actor=name, address=address,
                                                             details={"by": "web UI"}))
        if request is not None:
            request.signed_in = name
        return True

    return login
