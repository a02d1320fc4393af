"""Who calls the REST API: HTTP Basic sign-in (backing off after failures, app/server/signin.py),
the `User` and `Admin` dependencies every route takes, and the check that a call which changes
something is a script's or a JSON one (app/server/guards.py)."""
from __future__ import annotations

import math
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPBasic, HTTPBasicCredentials

from capscope.annotation import audit
from capscope.annotation.users import UserInfo, authenticate
from capscope.server.callers import SIGNIN_KEY, basic_credentials
from capscope.server.request_bodies import script_or_json
from capscope.server.signin import guard_for, signin_log_due


_basic = HTTPBasic(auto_error=False)


def user_from_request(request: Request) -> UserInfo | None:
    """The user named by the request's HTTP Basic credentials, or None (for the UI's auth hook);
    None too while failed sign-ins for the name or the client are backing off."""
    credentials = basic_credentials(request.headers.get("authorization"))
    if credentials is None:
        return None
    user, _wait = _guarded_sign_in(request, *credentials)
    return user


def basic_sign_in(scope, name: str, password: str) -> tuple[UserInfo | None, float]:
    """`_guarded_sign_in` for callers.CallerIdentity, which has the request's scope."""
    return _guarded_sign_in(Request(scope), name, password)


def _guarded_sign_in(request: Request, name: str, password: str) -> tuple[UserInfo | None, float]:
    """(the user or None, seconds to wait): the password is not even checked while failed
    sign-ins for this name or client address are backing off (app/server/signin.py).
    Checked once a request: the answer is kept in the request's scope."""
    kept = request.scope.get(SIGNIN_KEY)
    if kept is not None and kept[0] == (name, password):
        return kept[1]
    answer = _checked_sign_in(request, name, password)
    request.scope[SIGNIN_KEY] = ((name, password), answer)
    return answer


def _checked_sign_in(request: Request, name: str, password: str) -> tuple[UserInfo | None, float]:
    guard, address = guard_for(request.app), request.client.host if request.client else ""
    wait = guard.retry_after(name, address)
    if wait:
        return None, wait
    store = request.app.state.store
    user = authenticate(store, name, password)
    if user is None:
        guard.failed(name, address)
        audit.record(store, "sign-in failed", actor=name, address=address, details={"by": "REST"})
    else:
        guard.succeeded(name, address)
        if signin_log_due(request.app, name, address):
            audit.record(store, "sign-in", actor=name, address=address, details={"by": "REST"})
    return user, 0.0


def current_user(request: Request, _scheme: HTTPBasicCredentials | None = Depends(_basic)) -> UserInfo:
    challenge = {"WWW-Authenticate": 'Basic realm="capscope"'}
    credentials = basic_credentials(request.headers.get("authorization"))
    if credentials is None:
        raise HTTPException(401, "credentials required (HTTP Basic)", headers=challenge)
    user, wait = _guarded_sign_in(request, *credentials)
    if wait:
        seconds = max(1, math.ceil(wait))
        raise HTTPException(429, f"too many failed sign-ins: try again in {seconds} s",
                            headers={"Retry-After": str(seconds)})
    if user is None:
        raise HTTPException(401, "unknown user or wrong password", headers=challenge)
    if not script_or_json(request.method, request.headers):
        raise HTTPException(415, "a call that changes something takes Content-Type: application/json or an "
                                 "X-Requested-With header (a script's body-less call: -H 'X-Requested-With: script')")
    return user


def admin_user(user: UserInfo = Depends(current_user)) -> UserInfo:
    if not user.is_admin:
        raise HTTPException(403, "this call needs the admin role")
    return user


User = Annotated[UserInfo, Depends(current_user)]
Admin = Annotated[UserInfo, Depends(admin_user)]
