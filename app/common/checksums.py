"""sha256 of checkpoint files: recorded in every output row's `model` block (what
makes a number reproducible) and, for downloaded weights, checked on later loads
against the digest recorded at the first download."""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

_CHUNK = 1 << 20
_lock = threading.Lock()
_digests: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """The file's sha256 in hex, computed once per (path, size, mtime)."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        if key in _digests:
            return _digests[key]
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    value = digest.hexdigest()
    with _lock:
        _digests[key] = value
    return value


class ChecksumMismatch(ValueError):
    """A file's sha256 differs from the one recorded when it was downloaded."""


def record_path(path: str | Path) -> Path:
    """Where the digest recorded at download time lives: `FILE.sha256.json` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".sha256.json")


def record(path: str | Path, source: str, digest: str | None = None) -> str:
    """Record the file's digest (and where it came from) beside it; returns the
    digest. `digest`: the one already taken of these bytes (under another name)."""
    value = digest or file_sha256(path)
    record_path(path).write_text(json.dumps({"sha256": value, "source": source}, indent=1) + "\n")
    return value


def verify(path: str | Path) -> str | None:
    """Check a file against its recorded digest. Returns the digest when one was
    recorded, None when none was (a file the user brought); raises
    ChecksumMismatch when they differ."""
    recorded = record_path(path)
    if not recorded.is_file():
        return None
    expected = json.loads(recorded.read_text())["sha256"]
    value = file_sha256(path)
    if value != expected:
        raise ChecksumMismatch(
            f"{Path(path).name}: sha256 {value[:12]}... differs from {expected[:12]}... recorded at download "
            f"({recorded.name}); the file changed or is incomplete: download it again"
        )
    return value
