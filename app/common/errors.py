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
