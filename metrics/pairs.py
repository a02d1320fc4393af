"""`PreparedPair`, what every metric's `compute` takes: here, in a module that
imports nothing of capscope's at run time, so that the registry and the metric
classes need not import each other."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .text import Token


@dataclass
class PreparedPair:
    """One caption ready for a metric: its tokens and references. `window`
    marks a part of a caption too long for the metric's model (metrics.windows):
    a metric may give windows passes of their own shape."""

    caption: str
    tokens: list[Token]
    references: list[str] | None = None
    extra: dict = field(default_factory=dict)
    window: bool = False
