"""Reading JSONL files, the same way for every caller (`capscope score`'s
pairs, gold files, import files, training files): one JSON object per line,
blank lines skipped, each line checked on its own against
`limits.MAX_LINE_BYTES`, UTF-8 and JSON, so that a caller can report a bad line
by its number and go on, or stop at the first one.

`loads_limited` is the one JSON parser for text a user gives (these lines,
Label Studio exports, a diagnose summary.json): Python's json recurses once
per nesting level, so a line of 50,000 `[` would raise RecursionError; it is
refused as too deep before it is parsed."""
from __future__ import annotations

import json
import re
import sys
from itertools import accumulate
from pathlib import Path
from typing import IO, Iterator

from . import limits
from .errors import CapscopeError


class JsonlError(CapscopeError, ValueError):
    """A JSONL file with a line that is not a JSON object (or no such file)."""


class JsonTextError(CapscopeError, ValueError):
    """JSON text that cannot be read: malformed, nested too deep, or a number too long; one line."""


# a JSON string literal, escapes included; an unterminated one runs to the end (so a match never
# fails part way and is retried from the next quote: linear time on any text)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def loads_limited(text: str, max_depth: int = limits.MAX_JSON_DEPTH):
    """`json.loads(text)` with arrays and objects nested at most `max_depth`
    deep; JsonTextError, in one line, for malformed, too deep or otherwise
    unreadable JSON (a number of more digits than Python converts included)."""
    if too_deep(text, max_depth):
        raise JsonTextError(f"JSON nested more than {max_depth} levels deep")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}" if err.lineno > 1 else f"column {err.colno}"
        raise JsonTextError(f"malformed JSON: {err.msg} at {where}") from None
    except RecursionError:  # not below the depth limit; kept as a second guard
        raise JsonTextError(f"JSON nested more than {max_depth} levels deep") from None
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise JsonTextError(f"unreadable JSON: a number has more than {sys.get_int_max_str_digits()} digits") from None


def too_deep(text: str, max_depth: int = limits.MAX_JSON_DEPTH) -> bool:
    """Whether arrays and objects nest deeper than `max_depth` (counted only when there are that many brackets)."""
    return text.count("[") + text.count("{") > max_depth and json_depth(text) > max_depth


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON text, brackets inside strings
    not counted; computed without recursion, in linear time."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def shown(value, limit: int = 60) -> str:
    """A value read from a user's JSON, as JSON text for an error line (not a
    Python repr), cut at `limit` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
        obj = loads_limited(raw.decode("utf-8").rstrip("\r\n"))  # a line's error at its column, not "line 2"
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 (byte {err.start})"
    except JsonTextError as err:
        return None, str(err)
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    return obj, None
