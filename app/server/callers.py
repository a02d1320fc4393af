"""Who a request comes from, decided once, before any of its body is read.

`CallerIdentity` (an ASGI middleware) puts a `Caller` in the request's scope:
- the web UI's user, when the request carries a live session cookie;
- the REST user, when it carries HTTP Basic credentials that are right: checked
  here (in a worker thread, through the sign-in guard's back-off) for every
  request that has a body, and the answer kept for the API's own check, so a
  password is checked once a request;
- else an anonymous caller, known by its address.

The limits that follow (guards.BodyLimit's per-caller body size, InFlightCap's
per-caller requests) read that one identity, so spelling one Basic header in
several ways ("basic", padding, spaces) is still one caller, and a wrong
password makes a stranger, not a user.
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import anyio.to_thread
from starlette.datastructures import Headers

from capscope.annotation import audit

SCOPE_KEY = "capscope.caller"
SIGNIN_KEY = "capscope.signin"  # (user or None, seconds to wait) of the request's Basic credentials
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Caller:
    kind: str   # "user" (REST or UI, signed in) or "anonymous"
    name: str   # the user's name, or the anonymous caller's address

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def signed_in(self) -> bool:
        return self.kind == "user"


def basic_credentials(header: str | None) -> tuple[str, str] | None:
    """(name, password) of an HTTP Basic Authorization header, or None when it is not one.
    The scheme's case and the spaces around the token do not matter (RFC 7617)."""
    scheme, _, encoded = (header or "").strip().partition(" ")
    encoded = encoded.strip()
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        name, colon, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (name, password) if colon else None


def cookie_pairs(cookies: str):
    """(name, value) of each cookie in a Cookie header, in order."""
    for part in cookies.split(";"):
        name, _, value = part.strip().partition("=")
        yield name, value


def session_token(cookies: str) -> str | None:
    """The web UI's session token from a Cookie header (Gradio's access-token cookies)."""
    return next((value for name, value in cookie_pairs(cookies) if name.startswith("access-token") and value), None)


def client_address(scope) -> str:
    client = scope.get("client")
    return client[0] if client else ""


def caller_of(scope) -> Caller:
    """The request's caller, as `CallerIdentity` decided it (anonymous by address where it did not run)."""
    return scope.get(SCOPE_KEY) or Caller("anonymous", client_address(scope))


class CallerIdentity:
    """Decides the `Caller` of every HTTP request (see the module's docstring).
    `state`: the app's state, whose `session_user(token)` (set once the UI is
    mounted) names a live UI session's user and whose `basic_sign_in(scope,
    name, password)` (set by the API) checks REST credentials."""

    def __init__(self, app, state):
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            caller = scope[SCOPE_KEY] = await self.identify(scope)
            claimed = basic_credentials(Headers(scope=scope).get("authorization"))
            # who acts, for the audit log: the endpoint's own check of the credentials comes first
            audit.set_acting(caller.name if caller.signed_in else claimed[0] if claimed else None,
                             client_address(scope))
            if scope["path"].rstrip("/").endswith("/logout") and caller.signed_in:
                store = getattr(self.state, "store", None)
                if store is not None:
                    await anyio.to_thread.run_sync(lambda: audit.record(store, "sign-out", actor=caller.name))
        return await self.app(scope, receive, send)

    async def identify(self, scope) -> Caller:
        headers = Headers(scope=scope)
        credentials = basic_credentials(headers.get("authorization"))
        if credentials is not None and scope["method"] not in SAFE_METHODS:
            sign_in = getattr(self.state, "basic_sign_in", None)
            if sign_in is not None:
                user, _wait = await anyio.to_thread.run_sync(sign_in, scope, *credentials)
                if user is not None:
                    return Caller("user", user.name)
        token = session_token(headers.get("cookie", ""))
        session_user = getattr(self.state, "session_user", None)
        name = session_user(token) if token and session_user is not None else None
        if name:
            return Caller("user", name)
        return Caller("anonymous", client_address(scope))
