"""The command line: one module per command group (named after its command),
the flags they share in `options`."""
