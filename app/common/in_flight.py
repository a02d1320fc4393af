"""How many calls each caller has waiting or running, with a ceiling.

One counter for every per-user limit of the server: the REST endpoints'
requests in flight (server/guards.py), the scorer's turns (server/scoring.py)
and the segmenter's calls (server/segmenting.py). A caller at the ceiling is
refused at once with `Busy` (REST: 429); the others are not slowed."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from capscope.common.errors import CapscopeError


class Busy(CapscopeError):
    """Refused at once: the caller already has as many calls in flight as allowed (REST: 429)."""


class InFlight:
    """At most `most` calls in flight per caller; thread-safe. `what` names the calls in the
    refusal ("you already have 2 segment calls running; wait for them to finish"), raised
    as `error` (a subclass of Busy)."""

    def __init__(self, most: int, what: str, error: type[Busy] = Busy):
        if most < 1:
            raise ValueError("the ceiling must be at least 1")
        self.most, self.what, self.error = most, what, error
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, caller: str) -> int:
        return self._counts.get(caller, 0)

    def refusal(self) -> str:
        return f"you already have {self.most} {self.what}; wait for them to finish"

    def check(self, caller: str) -> None:
        """Raise `error` now if `caller` is at the ceiling (before costly work)."""
        if self.count(caller) >= self.most:
            raise self.error(self.refusal())

    def enter(self, caller: str) -> None:
        with self._lock:
            self.check(caller)
            self._counts[caller] = self.count(caller) + 1

    def leave(self, caller: str) -> None:
        with self._lock:
            left = self.count(caller) - 1
            if left > 0:
                self._counts[caller] = left
            else:
                self._counts.pop(caller, None)

    @contextmanager
    def held(self, caller: str) -> Iterator[None]:
        """One of `caller`'s calls in flight for the block (refused at the ceiling)."""
        self.enter(caller)
        try:
            yield
        finally:
            self.leave(caller)
