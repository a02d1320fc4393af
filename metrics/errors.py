"""The errors' old home, kept as an entry point: they live in
`capscope.common.errors`."""
from capscope.common.errors import CapscopeError, ModelUnavailable

__all__ = ["CapscopeError", "ModelUnavailable"]
