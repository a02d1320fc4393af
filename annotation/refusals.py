"""Errors the workflow raises for a caller's mistake; the REST API maps each to
its HTTP status (`status`), the CLI and UI show the message."""
from capscope.common.errors import CapscopeError


class AnnotationError(CapscopeError):
    status = 400


class NotFound(AnnotationError):
    status = 404


class Forbidden(AnnotationError):
    status = 403


class Invalid(AnnotationError):
    status = 422


class Conflict(AnnotationError):
    status = 409
