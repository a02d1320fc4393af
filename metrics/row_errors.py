"""`RowError`: why one input row cannot be scored (the row gets the message,
the rest of the batch goes on)."""
from capscope.common.errors import CapscopeError


class RowError(CapscopeError, ValueError):
    """Why one input row cannot be scored."""
