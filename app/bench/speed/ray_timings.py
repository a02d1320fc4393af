"""`capscope bench`'s Ray figure: `capscope score` on one file, run here and
with `--engine ray` on this machine."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from capscope.bench.speed.timed_models import model_files
from capscope.bench.speed.timed_pairs import make_shared_pairs, write_pairs_file

SCORE_LOG = re.compile(r"(\d+) pairs in ([\d.]+) s \(([\d.]+) pairs/s\), (\d+) with errors")


def ray_speed(device: str, metric: str, rows: int, captions_per_image: int, batch_size: int, workers: int) -> dict | None:
    """`capscope score` on one file, run here and with `--engine ray` on this
    machine (RAY_ADDRESS, else a cluster started here, else a new one): what the
    Ray path costs where it has nothing to spread over. None without Ray."""
    if importlib.util.find_spec("ray") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="capscope-bench-ray-") as tmp:
        folder = Path(tmp)
        files = model_files(folder, (metric,))[metric]
        write_pairs_file(make_shared_pairs(rows, captions_per_image), folder / "pairs.jsonl")
        command = [sys.executable, "-m", "capscope.cli", "score", "--input", str(folder / "pairs.jsonl"),
                   "--metric", metric, "--regions", "given", "--device", device, "--batch-size", str(batch_size)]
        command += [arg for key, value in files.items() for arg in (f"--{key.replace('_', '-')}", value)]
        local = timed_score(command + ["--output", str(folder / "local.jsonl")])
        ray = timed_score(command + ["--output", str(folder / "ray.jsonl"), "--engine", "ray", "--workers", str(workers)])
    return {"metric": metric, "rows": rows, "captions_per_image": captions_per_image, "workers": workers,
            "local": local, "ray": ray, "ratio": ray["rows_per_s"] / local["rows_per_s"]}


def timed_score(command: list[str]) -> dict:
    """Rows/s of the scoring loop as the command logs it (the Ray one includes
    starting its workers and their models) and the wall time of the whole command."""
    start = time.perf_counter()
    # the Ray run's instance serves this machine alone: keep it on loopback (Ray binds the machine's address otherwise)
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    found = SCORE_LOG.search(done.stderr)
    if done.returncode != 0 or found is None or int(found.group(4)):
        raise RuntimeError(f"bench: capscope score failed: {done.stderr.strip()[-500:]}")
    rows, seconds = int(found.group(1)), float(found.group(2))
    return {"rows_per_s": float(found.group(3)), "loop_s": seconds, "wall_s": wall, "wall_rows_per_s": rows / wall}
