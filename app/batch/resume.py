"""Streaming the input of `capscope score` and resuming into an output of any
size: rows are read as they are scored, and the ids an output already answers
are kept as 8-byte digests (a million ids in 8 MB), not as strings."""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
from array import array
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

COUNT_LIMIT_BYTES = 4 << 30  # count an input's lines for the progress bar only below this size


def id_digest(value: str) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest(), "little")


class AnsweredIds:
    """The ids of an output file's rows, as a sorted array of 64-bit digests
    (two ids share a digest with odds of about n² / 2⁶⁵: 3e-8 for a million)."""

    def __init__(self, digests: Iterable[int] = ()):
        self._sorted = np.unique(np.fromiter(digests, dtype=np.uint64))

    def __len__(self) -> int:
        return len(self._sorted)

    def __contains__(self, value) -> bool:
        if not isinstance(value, str) or not len(self._sorted):
            return False
        digest = np.uint64(id_digest(value))
        at = int(np.searchsorted(self._sorted, digest))
        return at < len(self._sorted) and self._sorted[at] == digest

    @classmethod
    def read(cls, path: Path, retry_errors: bool = False) -> tuple[AnsweredIds, int]:
        """The ids answered in `path` and how many rows with an error were taken
        out of it. A line torn by a crash is cut off; with `retry_errors` the
        rows saved with an error are removed from the file (so that their ids,
        scored again, appear once) and do not count as answered."""
        if not path.exists():
            return cls(), 0
        digests, kept_bytes, dropped = array("Q"), 0, 0
        temporary = path.with_name(path.name + ".retry") if retry_errors else None
        with path.open("rb") as handle, (temporary.open("wb") if temporary else contextlib.nullcontext()) as copy:
            for raw in handle:
                try:
                    row = json.loads(raw)
                    answer = row["id"], row.get("error")
                except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
                    break
                kept_bytes += len(raw)
                if retry_errors and answer[1] is not None:
                    dropped += 1
                    continue
                if copy is not None:
                    copy.write(raw)
                if isinstance(answer[0], str):
                    digests.append(id_digest(answer[0]))
        if temporary is not None:
            os.replace(temporary, path)
        else:
            with path.open("r+b") as handle:
                handle.truncate(kept_bytes)
        return cls(digests), dropped


def batched(items: Iterable, size: int) -> Iterator[list]:
    """Lists of `size` items (the last may be shorter), read as they are needed."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def count_lines(path: Path) -> int | None:
    """Non-blank lines of a local file below COUNT_LIMIT_BYTES (a quick pass), else None."""
    if path.stat().st_size > COUNT_LIMIT_BYTES:
        return None
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())
