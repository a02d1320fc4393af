"""Reading JSONL files, the same way for every caller (`capscope score`'s
pairs, gold files, import files, training files): one JSON object per line,
blank lines skipped, each line checked on its own against
`limits.MAX_LINE_BYTES`, UTF-8 and JSON, so that a caller can report a bad line
by its number and go on, or stop at the first one."""
from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Iterator

from . import limits
from .errors import CapscopeError


class JsonlError(CapscopeError, ValueError):
    """A JSONL file with a line that is not a JSON object (or no such file)."""


def json_lines(source: str | Path | IO[bytes]) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line number, object, None) for each non-blank line holding a JSON
    object; (line number, None, why) for one that does not. `source` is a path
    or a binary stream."""
    if isinstance(source, (str, Path)):
        with open(source, "rb") as stream:
            yield from json_lines(stream)
        return
    for number, raw in enumerate(source, start=1):
        if raw.strip():
            obj, why = _parse(raw)
            yield number, obj, why


def read_json_lines(path: str | Path) -> list[dict]:
    """Every object of a JSONL file; JsonlError naming the file and line of the first bad one."""
    if not Path(path).is_file():
        raise JsonlError(f"{path}: no such file")
    rows = []
    for number, obj, why in json_lines(path):
        if why:
            raise JsonlError(f"{path}:{number}: {why}")
        rows.append(obj)
    return rows


def _parse(raw: bytes) -> tuple[dict | None, str | None]:
    if len(raw) > limits.MAX_LINE_BYTES:
        return None, f"line is {len(raw)} bytes (limit {limits.MAX_LINE_BYTES})"
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 (byte {err.start})"
    except json.JSONDecodeError as err:
        return None, f"malformed JSON: {err.msg} at column {err.colno}"
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    return obj, None
