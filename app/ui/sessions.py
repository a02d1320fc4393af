"""UI sessions that end. Gradio keeps its login cookies' tokens in a plain
dict (`App.tokens`, token → user name) for as long as the process lives;
`expire_sessions` swaps in `Sessions`, which forgets a token once it is older
than the session lifetime, or once the user's password or active flag has
changed since it was issued (`credential_stamp`), e.g. after `capscope users
add NAME --replace` or `capscope users disable NAME`."""
from __future__ import annotations

import os
import time
from typing import Callable

from capscope.annotation.users import credential_stamp
from capscope.db import Store
from capscope.common.errors import CapscopeError

SESSION_HOURS = 12.0


def session_hours(hours: float | None = None) -> float:
    """`hours`, else CAPSCOPE_SESSION_HOURS, else `SESSION_HOURS`."""
    if hours is None:
        raw = os.environ.get("CAPSCOPE_SESSION_HOURS")
        try:
            hours = float(raw) if raw else SESSION_HOURS
        except ValueError:
            raise CapscopeError(f"CAPSCOPE_SESSION_HOURS must be a number of hours, not {raw!r}") from None
    if not hours > 0:
        raise CapscopeError(f"the session lifetime must be more than 0 hours, not {hours}")
    return hours


class Sessions(dict):
    """Gradio's token → user name map whose tokens lapse. Reading a lapsed token
    gives None (Gradio reads it through `get`, `in` and `[]`) and drops it.
    `[]` gives None too rather than KeyError: Gradio's logout lists the tokens,
    then reads each one, and one may lapse in between."""

    def __init__(self, store: Store, lifetime_s: float, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.store, self.lifetime_s, self.clock = store, lifetime_s, clock
        self.issued: dict[str, tuple[float, str | None]] = {}

    def __setitem__(self, token, name) -> None:
        self._drop_old()
        super().__setitem__(token, name)
        self.issued[token] = (self.clock(), credential_stamp(self.store, name))

    def get(self, token, default=None):
        return super().get(token, default) if self._live(token) else default

    def __getitem__(self, token):
        return self.get(token)

    def __contains__(self, token) -> bool:
        return self._live(token)

    def __delitem__(self, token) -> None:
        super().__delitem__(token)
        self.issued.pop(token, None)

    def pop(self, token, *default):
        self.issued.pop(token, None)
        return super().pop(token, *default)

    def _live(self, token) -> bool:
        if token is None or not super().__contains__(token):
            return False
        issued, stamp = self.issued.get(token, (float("-inf"), None))
        name = super().get(token)
        if self.clock() - issued < self.lifetime_s and stamp is not None \
                and credential_stamp(self.store, name) == stamp:
            return True
        self.pop(token, None)
        return False

    def _drop_old(self) -> None:
        """Drop tokens past their lifetime (the oldest come first): ones nobody reads again must not pile up."""
        horizon = self.clock() - self.lifetime_s
        for token, (issued, _) in list(self.issued.items()):
            if issued >= horizon:
                break
            self.pop(token, None)


def expire_sessions(app, store: Store, lifetime_s: float) -> Sessions:
    """Give the Gradio app mounted on `app` (the last one mounted) sessions that lapse."""
    from gradio.routes import App
    from starlette.routing import Mount

    mounted = [route.app for route in app.routes if isinstance(route, Mount) and isinstance(route.app, App)]
    if not mounted:
        raise RuntimeError("no Gradio app is mounted on this app")
    sessions = mounted[-1].tokens = Sessions(store, lifetime_s)
    return sessions
