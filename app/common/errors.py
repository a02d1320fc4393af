"""The one base class of the errors a user can fix.

Every layer raises a subclass (`ModelUnavailable` below, `scorer.RowError`,
`images.ImageError`, `annotation.errors.AnnotationError`, ...) whose message is
one actionable line; the CLI prints it without a traceback and the server maps
it to a 4xx/5xx answer, both by type.
"""
from __future__ import annotations


class CapscopeError(Exception):
    """An error the user can fix; shown as one line."""


class ModelUnavailable(CapscopeError, RuntimeError):
    """A pretrained component cannot be had; the message is one actionable line."""


def first_line(err: BaseException) -> str:
    """An error as one line: its message's first line, or its type's name when it has no message."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def with_type(err: BaseException, limit: int | None = None) -> str:
    """`Type: first line` (cut to `limit` characters), for errors from code that is not capscope's."""
    text = str(err).strip()
    line = text.splitlines()[0][:limit] if text else ""
    return f"{type(err).__name__}: {line}" if line else type(err).__name__
