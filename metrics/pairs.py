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
    """One caption ready for a metric: its tokens and references."""

    caption: str
    tokens: list[Token]
    references: list[str] | None = None
    extra: dict = field(default_factory=dict)
