"""`capscope diagnose`'s own cost on scored rows: its wall time (adding up,
intervals, summary and report; nothing is scored) and the peak resident memory
of the whole process, at several row counts
(`python -m capscope.bench.diagnose_load --source SCORED.jsonl --rows 5000 100000 --out DIR`).

Two captioners, `a` and `b`, of `--images` distinct images; their rows are
copies of the source's scored rows (ids renumbered, the k-th row on image
k mod `--images`, each image a link to a source row's picture), half the rows
each. Each count runs in a fresh process under /usr/bin/time. Prints a table
and writes DIR/diagnose_load.json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from capscope.common.jsonl import json_lines


def write_rows(source: Path, out: Path, n: int, images: Path, n_images: int) -> None:
    """n rows cycled from the source's rows, on images images/img{k mod n_images}.png."""
    rows = [row for _, row, why in json_lines(source) if not why and row.get("metrics")]
    if not rows:
        raise SystemExit(f"{source}: no scored rows")
    images.mkdir(parents=True, exist_ok=True)
    for j in range(n_images):
        link = images / f"img{j:07d}.png"
        if not link.exists():
            link.symlink_to(Path(rows[j % len(rows)]["image"]).resolve())
    with out.open("w", encoding="utf-8") as handle:
        for k in range(n):
            row = rows[k % len(rows)]
            handle.write(json.dumps({**row, "id": str(k), "image": str(images / f"img{k % n_images:07d}.png")}) + "\n")


def measure(files: dict[str, Path], report: Path, draws: int) -> dict:
    """Wall seconds and peak RSS (MB) of one `capscope diagnose` process."""
    command = ["/usr/bin/time", "-f", "TIME %e %M", sys.executable, "-m", "capscope.cli", "diagnose",
               "--out", str(report), "--bootstrap", str(draws)]
    for name, path in files.items():
        command += ["--model", f"{name}={path}"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    line = next(l for l in done.stderr.splitlines() if l.startswith("TIME "))
    _, seconds, peak_kb = line.split()
    return {"wall_s": round(wall, 2), "time_s": float(seconds), "peak_rss_mb": round(int(peak_kb) / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="rows capscope score (or diagnose) wrote")
    parser.add_argument("--rows", type=int, nargs="+", default=[5000, 100000])
    parser.add_argument("--images", type=int, default=5000, help="distinct images the rows are spread over")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for n in args.rows:
        files = {name: args.out / f"{name}-{n}.jsonl" for name in ("a", "b")}
        for path in files.values():
            write_rows(args.source, path, n // 2, args.out / "images", args.images)
        figures = measure(files, args.out / f"report-{n}", args.bootstrap)
        for path in files.values():
            path.unlink()
        results.append({"rows": n, "images": args.images, **figures})
        print(f"{n:>9} rows on {args.images} images: {figures['wall_s']:.1f} s, peak RSS {figures['peak_rss_mb']:.0f} MB",
              flush=True)
    (args.out / "diagnose_load.json").write_text(json.dumps({"bootstrap": args.bootstrap, "results": results},
                                                            indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
