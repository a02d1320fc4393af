"""No module grows past 400 lines: past that, a file holds more than one
concern and a reader has to page through all of them to find one. Tests and
migrations are left out."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("app", "metrics", "annotation", "db")
MOST_LINES = 400


def long_files(most: int = MOST_LINES) -> dict[str, int]:
    sizes = {}
    for folder in CODE:
        for path in (ROOT / folder).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > most:
                sizes[path.relative_to(ROOT).as_posix()] = lines
    return sizes


def test_no_module_is_over_400_lines():
    assert long_files() == {}


def test_a_long_module_would_be_found():
    assert "db/models.py" in long_files(most=100)
