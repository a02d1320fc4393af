"""Guessing passwords against the server: back-off, and the UI's sign-in.

`SignInGuard` counts failed sign-ins per user name at a client address, and
per client address. After `limit` failures within `window_s` for either,
attempts for it are refused without a password check for `first_backoff_s`;
each failure after that backs off twice as long as the one before, up to
`max_backoff_s`, until `window_s` passes without a failure or a back-off. A
success clears the name's count at that address (not the address's: one's own
account must not wash out guesses at others'). A name is never counted alone:
whoever guesses at a name from one address cannot lock its owner out at
another (an admin locked out at one address signs in from another, or once
the back-off ends). Behind a proxy the address is the client's own
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
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

import anyio

from capscope.annotation.users import authenticate
from capscope.db import Store

UI_HASHING_AT_ONCE = 2
client_address: contextvars.ContextVar[str] = contextvars.ContextVar("capscope_client_address", default="")
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

    def retry_after(self, name: str, address: str) -> float:
        """Seconds until attempts for this name and address are checked again; 0: now."""
        now = self.clock()
        with self._lock:
            waits = [self._record(key, now) for key in self._keys(name, address)]
        return max((r.blocked_until - now for r in waits if r and r.blocked_until > now), default=0.0)

    def failed(self, name: str, address: str) -> None:
        now = self.clock()
        with self._lock:
            for key in self._keys(name, address):
                record = self._record(key, now) or self._add(key)
                record.failures.append(now)
                if record.backoffs or (len(record.failures) == self.limit
                                       and record.failures[0] > now - self.window_s):
                    doubled = self.first_backoff_s * 2 ** min(record.backoffs, 40)
                    record.blocked_until = now + min(doubled, self.max_backoff_s)
                    record.backoffs += 1

    def succeeded(self, name: str, address: str) -> None:
        with self._lock:
            self._records.pop(self._keys(name, address)[0], None)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        return len(self._records)

    @staticmethod
    def _keys(name: str, address: str) -> tuple[tuple[str, str], ...]:
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


def guard_for(app) -> SignInGuard:
    """The app's one guard (made on first use), shared by the REST API and the UI mounted on it."""
    guard = getattr(app.state, "signin_guard", None)
    if guard is None:
        with _guards_made:
            guard = getattr(app.state, "signin_guard", None)
            if guard is None:
                guard = app.state.signin_guard = SignInGuard()
    return guard


class ClientAddress:
    """ASGI middleware: the request's client address, for the UI's login function to read."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            client = scope.get("client")
            client_address.set(client[0] if client else "")
        await self.app(scope, receive, send)


def ui_auth(app, store: Store):
    """Gradio's `auth` callable for the UI mounted on `app`: an `async def` (Gradio awaits
    it on the event loop) whose hashing runs in a worker thread."""
    slots = anyio.Semaphore(UI_HASHING_AT_ONCE)

    async def login(name: str, password: str) -> bool:
        guard, address = guard_for(app), client_address.get()
        if guard.retry_after(name, address):
            return False
        async with slots:
            user = await anyio.to_thread.run_sync(authenticate, store, name, password)
        if user is None:
            guard.failed(name, address)
            return False
        guard.succeeded(name, address)
        return True

    return login
