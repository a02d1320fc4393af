"""CSV cells that a spreadsheet opens as data, never as formulas."""
from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cells(row: list) -> list:
    """The row with each text cell that a spreadsheet would run as a formula
    (starting with =, +, -, @, tab or carriage return) prefixed with a quote
    (OWASP's advice on CSV injection); numbers stay numbers."""
    return [f"'{cell}" if isinstance(cell, str) and cell.startswith(FORMULA_STARTS) else cell for cell in row]
