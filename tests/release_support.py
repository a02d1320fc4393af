"""A benchmark release folder written by hand, as `capscope release` writes one
(contracts section 11, docs/formats.md section 15), for the leaderboard's tests."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_release(out: Path, items: list[dict], images: Path, *, controls=(), name="demo", version="1.0") -> Path:
    """A release folder as contracts section 11 describes it, written without capscope's own writer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (out / "images").mkdir(parents=True)
    rows = []
    for k, item in enumerate(items):
        source = images / Path(item["image"]).relative_to("images")
        digest = sha256(source)
        target = out / "images" / f"{digest}.png"
        if not target.exists():
            shutil.copyfile(source, target)
        row = {**item, "image": f"images/{digest}.png", "control": k in controls, "gold_method": "majority"}
        row["tokens"] = [{**t, "confidence": None if t["label"] is None else 1.0} for t in item["tokens"]]
        row["regions"] = [{**r, "confidence": None if r["label"] is None else 1.0} for r in item["regions"]]
        rows.append(row)
    (out / "benchmark.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist([{k: r[k] for k in ("id", "image", "caption")} for r in rows]),
                   out / "benchmark.parquet")
    (out / "datasheet.md").write_text(f"# {name} {version}\n")
    seal(out, {"name": name, "version": version, "created_at": "2026-11-29T00:00:00Z", "method": "majority",
               "items": len(rows), "annotators": 0, "judgements": 0, "agreement": {}})
    return out


def seal(out: Path, metadata: dict | None = None) -> None:
    """metadata.json with the sha256 of every other file as they are now."""
    path = out / "metadata.json"
    metadata = metadata or json.loads(path.read_text())
    files = {p.relative_to(out).as_posix(): sha256(p) for p in sorted(out.rglob("*"))
             if p.is_file() and p.name != "metadata.json"}
    path.write_text(json.dumps({**metadata, "files": files}, indent=2))
