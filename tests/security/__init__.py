"""The security tests: one package, so that its conftest's package-scoped server stops when they end
(without this file pytest keeps a package-scoped fixture until the whole session ends)."""
