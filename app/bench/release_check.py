"""Checking a benchmark release folder before anything is scored (`capscope
evaluate --benchmark DIR`, the Benchmark tab's leaderboard).

A release (docs/formats.md, "Benchmark releases") is `metadata.json` with the
sha256 of every other file, `benchmark.jsonl` (one CapTokenEval row per item),
`benchmark.parquet` (the same rows), `images/` and `datasheet.md`. It may have
been made by another capscope: nothing here reads a database. Each problem is
one line naming the file (and the line of `benchmark.jsonl`), raised as
`ReleaseError`; the first one stops the check.

Files are opened through `opener` (default: a plain open), so that the server
can read a release only through its data roots (`DataRoots.open_checked`).
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable

from capscope.common.errors import CapscopeError, first_line
from capscope.common.jsonl import json_lines, loads_limited, shown

JSONL, PARQUET, DATASHEET, METADATA = "benchmark.jsonl", "benchmark.parquet", "datasheet.md", "metadata.json"
REQUIRED = (JSONL,)              # what a leaderboard cannot do without (the others are checked when listed)
TOKEN_LABELS = ("correct", "incorrect", None)
REGION_LABELS = ("mentioned", "unmentioned", None)
SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_METADATA_BYTES = 50 << 20

Opener = Callable[[Path], BinaryIO]


class ReleaseError(CapscopeError, ValueError):
    """A release folder that cannot be evaluated; the message names the file (and line)."""


@dataclass
class Release:
    """A checked release: its folder, metadata and rows (in file order, with their line numbers)."""
    folder: Path
    metadata: dict
    items: list[dict]
    lines: list[int]

    @property
    def label(self) -> str:
        m = self.metadata
        return f"{m.get('name', self.folder.name)} {m.get('version', '')}".strip()


def plain_open(path: Path) -> BinaryIO:
    return open(path, "rb")


def check_release(folder: str | Path, opener: Opener = plain_open) -> Release:
    """The release in `folder`, every listed file present with its sha256, every row a
    CapTokenEval row whose image is in the release; ReleaseError (one line) otherwise."""
    folder = Path(folder)
    if folder.is_file():
        raise ReleaseError(f"{folder} is a file, not a release folder (give the folder that holds {METADATA})")
    if not folder.is_dir():
        raise ReleaseError(f"{folder}: no such release folder")
    metadata = read_metadata(folder, opener)
    files = metadata["files"]
    for name in REQUIRED:
        if name not in files:
            raise ReleaseError(f"{folder / METADATA}: 'files' does not list {name}")
    for name, expected in files.items():
        check_file(folder, name, expected, opener)
    items, lines = read_rows(folder, opener)
    check_images(folder, items, lines, files)
    check_counts(folder, metadata, items, opener)
    return Release(folder, metadata, items, lines)


def read_metadata(folder: Path, opener: Opener = plain_open) -> dict:
    path = folder / METADATA
    if not path.exists():
        raise ReleaseError(f"{path}: missing (a release lists its files and their sha256 there)")
    try:
        with opener(path) as handle:
            raw = handle.read(MAX_METADATA_BYTES + 1)
    except OSError as err:
        raise ReleaseError(f"{path}: cannot be read ({err.strerror or err})") from None
    if len(raw) > MAX_METADATA_BYTES:
        raise ReleaseError(f"{path}: larger than {MAX_METADATA_BYTES >> 20} MB")
    try:
        metadata = loads_limited(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ReleaseError(f"{path}: not UTF-8 (byte {err.start})") from None
    except ValueError as err:
        raise ReleaseError(f"{path}: {err}") from None
    if not isinstance(metadata, dict):
        raise ReleaseError(f"{path}: expected a JSON object, got {type(metadata).__name__}")
    files = metadata.get("files")
    if not isinstance(files, dict) or not files:
        raise ReleaseError(f"{path}: no 'files' object (relative path: sha256)")
    for name, digest in files.items():
        if not isinstance(digest, str) or not SHA256.fullmatch(digest):
            raise ReleaseError(f"{path}: the sha256 of {shown(name)} is not 64 hex digits: {shown(digest)}")
        safe_relative(folder, name, f"{path}: listed file")
    return metadata


def safe_relative(folder: Path, name, what: str) -> Path:
    """`folder / name` for a relative POSIX path that stays inside the folder; ReleaseError otherwise."""
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        raise ReleaseError(f"{what} {shown(name)} is not a relative path")
    parts = PurePosixPath(name)
    if parts.is_absolute() or ".." in parts.parts or name.startswith("~"):
        raise ReleaseError(f"{what} {shown(name)} is not a path inside the release")
    return folder.joinpath(*parts.parts)


def check_file(folder: Path, name: str, expected: str, opener: Opener = plain_open) -> None:
    path = folder.joinpath(*PurePosixPath(name).parts)
    if not path.exists():
        raise ReleaseError(f"{path}: missing (metadata.json lists {name})")
    digest = hashlib.sha256()
    try:
        with opener(path) as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as err:
        raise ReleaseError(f"{path}: cannot be read ({err.strerror or err})") from None
    if digest.hexdigest() != expected:
        raise ReleaseError(f"{path}: sha256 {digest.hexdigest()[:16]}... differs from {expected[:16]}... in "
                           "metadata.json (the file changed after the release was made)")


def read_rows(folder: Path, opener: Opener = plain_open) -> tuple[list[dict], list[int]]:
    path = folder / JSONL
    items, lines = [], []
    with opener(path) as handle:
        for number, obj, why in json_lines(handle):
            why = why or row_problem(obj)
            if why:
                raise ReleaseError(f"{path} line {number}: {why}")
            items.append(obj)
            lines.append(number)
    if not items:
        raise ReleaseError(f"{path}: no rows")
    seen: dict[str, int] = {}
    for item, number in zip(items, lines):
        key = str(item["id"])
        if key in seen:
            raise ReleaseError(f"{path} line {number}: id {shown(key)} is also on line {seen[key]}")
        seen[key] = number
    return items, lines


def row_problem(obj: dict) -> str | None:
    """Why `obj` is not a CapTokenEval row (contracts 3 and 10, with a release's
    `confidence`, `control` and `gold_method`); None when it is one."""
    from capscope.metrics.text import checked_tokens

    ident = obj.get("id")
    if isinstance(ident, bool) or not isinstance(ident, (str, int)) or not str(ident).strip():
        return "not a CapTokenEval row: missing field 'id' (a string)"
    for key in ("image", "caption"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            return f"not a CapTokenEval row: missing field {key!r} (a string)"
    for key in ("tokens", "regions"):
        if not isinstance(obj.get(key), list):
            return f"not a CapTokenEval row: missing field {key!r} (a list)"
    try:
        checked_tokens(obj["tokens"], obj["caption"])
    except ValueError as err:
        return f"not a CapTokenEval row: {err}"
    for i, token in enumerate(obj["tokens"]):
        if token.get("label") not in TOKEN_LABELS:
            return f"token {i}: label must be \"correct\", \"incorrect\" or null, not {shown(token.get('label'))}"
        if not _probability(token.get("confidence")):
            return f"token {i}: confidence must be a number from 0 to 1 or null"
    for i, region in enumerate(obj["regions"]):
        why = _region_problem(region)
        if why:
            return f"region {i}: {why}"
    for key, kind in (("control", bool), ("gold_method", str)):
        if obj.get(key) is not None and not isinstance(obj[key], kind):
            return f"{key!r} must be {'true or false' if kind is bool else 'a string'}"
    links = obj.get("links")
    if links is not None:
        if not isinstance(links, list):
            return "'links' must be a list"
        for link in links:
            if not isinstance(link, dict) or not all(_index(link.get(k), len(obj[f"{k}s"])) for k in ("token", "region")):
                return f"link {shown(link)} does not name a token and a region of the row"
    return None


def _region_problem(region) -> str | None:
    if not isinstance(region, dict):
        return "must be an object with a 'box'"
    box = region.get("box")
    if (not isinstance(box, list) or len(box) != 4 or not all(_finite(v) for v in box)
            or box[0] > box[2] or box[1] > box[3]):
        return f"box must be [x0, y0, x1, y1] with x0 <= x1 and y0 <= y1, not {shown(box)}"
    mask = region.get("mask")
    if mask is not None and not (isinstance(mask, dict) and isinstance(mask.get("counts"), (str, list))
                                 and isinstance(mask.get("size"), list) and len(mask["size"]) == 2):
        return "mask must be COCO RLE ({\"size\": [h, w], \"counts\": ...}) or null"
    if region.get("label") not in REGION_LABELS:
        return f"label must be \"mentioned\", \"unmentioned\" or null, not {shown(region.get('label'))}"
    if not _probability(region.get("confidence")):
        return "confidence must be a number from 0 to 1 or null"
    return None


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _probability(value) -> bool:
    return value is None or (_finite(value) and 0 <= value <= 1)


def _index(value, size: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < size


def check_images(folder: Path, items: list[dict], lines: list[int], files: dict) -> None:
    """Every row's image is a file of the release that metadata.json lists (so its sha256 was checked)."""
    path = folder / JSONL
    for item, number in zip(items, lines):
        image = safe_relative(folder, item["image"], f"{path} line {number}: image")
        if item["image"] not in files:
            where = "missing" if not image.exists() else "not listed in metadata.json"
            raise ReleaseError(f"{path} line {number}: image {item['image']} is {where}")


def check_counts(folder: Path, metadata: dict, items: list[dict], opener: Opener = plain_open) -> None:
    """metadata.json's item count, and the parquet's rows and their ids, agree with benchmark.jsonl."""
    count = metadata.get("items")
    if isinstance(count, int) and not isinstance(count, bool) and count != len(items):
        raise ReleaseError(f"{folder / METADATA}: says {count} items, {JSONL} has {len(items)} rows")
    if PARQUET not in metadata["files"]:
        return
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pyarrow is a dependency; a trimmed install still evaluates the JSONL
        return
    path = folder / PARQUET
    try:
        with opener(path) as handle:
            parquet = pq.ParquetFile(handle)
            rows = parquet.metadata.num_rows
            ids = parquet.read(columns=["id"]).column("id").to_pylist() if "id" in parquet.schema_arrow.names else None
    except Exception as err:  # pyarrow raises its own types for a file that is no parquet
        raise ReleaseError(f"{path}: not a parquet file ({first_line(err)})") from None
    if rows != len(items):
        raise ReleaseError(f"{path}: {rows} rows, {JSONL} has {len(items)}")
    if ids is None:
        raise ReleaseError(f"{path}: no 'id' column")
    for number, (ident, item) in enumerate(zip(ids, items), start=1):
        if str(ident) != str(item["id"]):
            raise ReleaseError(f"{path}: row {number} has id {shown(ident)}, {JSONL} row {number} {shown(item['id'])}")


def metadata_summary(release: Release) -> dict:
    """What a leaderboard says of its release (from metadata.json, counts from the rows)."""
    m = release.metadata
    return {"name": m.get("name"), "version": m.get("version"), "created_at": m.get("created_at"),
            "method": m.get("method"), "items": len(release.items),
            "images": len({item["image"] for item in release.items}),
            "controls": sum(bool(item.get("control")) for item in release.items),
            "benchmark_jsonl_sha256": m["files"][JSONL]}
