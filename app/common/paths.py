"""Names a user gives (a dataset, a model, a benchmark) made into file names,
and paths checked to stay where they were meant to be: one rule for every
place a server or a command writes a file named after user text, so that a
name like `x/../../outside` cannot write outside its folder."""
from __future__ import annotations

import re
from pathlib import Path

from .errors import CapscopeError
from .limits import MAX_FILE_NAME_CHARS, MAX_NAME_CHARS

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class UnsafePath(CapscopeError, ValueError):
    """A path made from user text would leave its folder."""


def safe_name(name: str, fallback: str = "unnamed", max_chars: int = MAX_FILE_NAME_CHARS) -> str:
    """`name` as one file name: letters, digits, `-`, `_` and `.` kept (ASCII
    only: what every file system and zip reader takes), anything else `_`, no
    leading dot (no hidden file, no `..`), at most `max_chars`; `fallback`
    when nothing is left."""
    cleaned = _UNSAFE.sub("_", str(name or ""))[:max_chars].lstrip(".")
    return cleaned or fallback


def inside(parent: Path, *parts: str) -> Path:
    """`parent / parts...` once checked to resolve (links and `..` followed)
    inside `parent`; UnsafePath otherwise. A second guard after `safe_name`."""
    root = Path(parent).resolve()
    path = root.joinpath(*parts).resolve()
    if not path.is_relative_to(root) or path == root:
        raise UnsafePath(f"{'/'.join(parts)} would lie outside {root}")
    return path


def name_problem(name, what: str = "name") -> str:
    """Why a name stored as data (a dataset's) cannot be used, or '' when it
    can: 1 to MAX_NAME_CHARS characters, not only spaces, no control characters."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        return f"{what} must be 1-{MAX_NAME_CHARS} characters"
    if _CONTROL.search(name):
        return f"{what} must not contain control characters"
    return ""
