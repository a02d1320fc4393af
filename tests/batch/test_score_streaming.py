"""`capscope score` on inputs of any size: rows are read as they are scored
(peak memory does not grow with the row count), error rows are compact, and a
resumed run can score its errors again with each id kept once."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from capscope.cli import main
from capscope.batch.resume import AnsweredIds, batched

pytestmark = pytest.mark.slow


def clip_args(checkpoint) -> list[str]:
    return ["--metric", "clip-s", "--clip-model", "ViT-B-32", "--clip-pretrained", str(checkpoint), "--device", "cpu"]


def write_rows(path, n: int, good_every: int = 0) -> None:
    """n lines: every `good_every`-th row a scorable one; of the rest, one in a
    hundred bad JSON, one in a hundred without an id, and all others rows with
    an id of their own whose image is missing (each id is kept to resume by)."""
    with path.open("w") as out:
        for i in range(n):
            if good_every and i % good_every == 0:
                out.write(json.dumps({"id": f"r{i}", "image": "scene.png", "caption": "a red square"}) + "\n")
            elif i % 100 == 1:
                out.write("not json\n")
            elif i % 100 == 2:
                out.write(json.dumps({"caption": "a row without an id"}) + "\n")
            else:
                out.write(json.dumps({"id": f"r{i}", "image": f"gone{i}.png", "caption": "a blue circle"}) + "\n")


def has_id(i: int, good_every: int) -> bool:
    return i % good_every == 0 or i % 100 not in (1, 2)


# In a fresh process: resident memory sampled every 20 ms from a second after
# the scorer is built to the end (loading a checkpoint briefly takes about
# twice the model's size, which would hide what reading and scoring hold).
PEAK_SCRIPT = """
import sys, threading, time
from pathlib import Path
from capscope.batch import pipeline
from capscope.cli import main

peak = [0.0]
def sample():
    time.sleep(1.0)
    while True:
        rss = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS"))
        peak[0] = max(peak[0], int(rss.split()[1]) / 1024)
        time.sleep(0.02)
build = pipeline.build_scorer
def build_then_sample(config):
    scorer = build(config)
    threading.Thread(target=sample, daemon=True).start()
    return scorer
pipeline.build_scorer = build_then_sample
code = main(sys.argv[1:])
import resource
print("WHOLE", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print("PEAK", peak[0])
sys.exit(code)
"""


def peak_rss_mb(input_path, output_path, checkpoint) -> tuple[float, float]:
    """capscope score in a fresh process: its peak resident memory while it
    scores, and the whole process's (loading the model included)."""
    code = PEAK_SCRIPT
    done = subprocess.run([sys.executable, "-c", code, "score", "--input", str(input_path), "--output",
                           str(output_path), "--batch-size", "64", *clip_args(checkpoint)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    whole = float(done.stdout.split("WHOLE")[-1].split()[0])
    return float(done.stdout.split("PEAK")[-1]), whole


@pytest.fixture
def folder(tmp_path):
    image = np.full((64, 64, 3), 230, dtype=np.uint8)
    image[16:48, 16:48] = (220, 30, 30)
    Image.fromarray(image).save(tmp_path / "scene.png")
    return tmp_path


def test_peak_memory_does_not_grow_with_the_row_count(folder, clip_checkpoint):
    sizes = {"small": 50_000, "large": 1_000_000}
    peaks, wholes, outputs = {}, {}, {}
    for name, n in sizes.items():
        write_rows(folder / f"{name}.jsonl", n, good_every=100_000)
        outputs[name] = folder / f"{name}-out.jsonl"
        peaks[name], wholes[name] = peak_rss_mb(folder / f"{name}.jsonl", outputs[name], clip_checkpoint)
    print(f"peak RSS while scoring: {peaks['small']:.0f} MB for 50,000 rows, {peaks['large']:.0f} MB for 1,000,000; "
          f"whole process: {wholes['small']:.0f} and {wholes['large']:.0f} MB")
    assert peaks["large"] - peaks["small"] < 100
    assert wholes["large"] - wholes["small"] < 100
    ids, lines, scored, size = [], 0, 0, 0
    with outputs["large"].open("rb") as handle:
        for raw in handle:
            row = json.loads(raw)
            lines += 1
            size += len(raw)
            scored += bool(row["metrics"])
            if row["id"] is not None:
                ids.append(row["id"])
            if row["error"] and not row["metrics"]:
                assert row["model"] is None and row["tokens"] == []  # compact: nothing it does not need
    assert lines == sizes["large"] and scored == 10
    assert len(ids) == len(set(ids)) == sum(has_id(i, 100_000) for i in range(sizes["large"])) > 970_000
    assert size / lines < 200  # bytes per row, mostly error rows


def test_retry_errors_scores_failed_rows_again_and_keeps_each_id_once(folder, clip_checkpoint):
    rows = [{"id": "a", "image": "scene.png", "caption": "a red square"},
            {"id": "b", "image": "later.png", "caption": "a red square"},
            {"id": "c", "image": "scene.png", "caption": ""}]
    (folder / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = folder / "out.jsonl"
    args = ["score", "--input", str(folder / "in.jsonl"), "--output", str(out), *clip_args(clip_checkpoint)]
    assert main(args) == 0
    first = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in first] == ["a", "b", "c"] and "image not found" in first[1]["error"]
    (folder / "scene.png").rename(folder / "later.png")  # b's image turns up; a's goes (a is not scored again)
    assert main(args) == 0
    assert out.read_text().splitlines() == [json.dumps(r, ensure_ascii=False) for r in first]  # nothing to redo
    assert main(args + ["--retry-errors"]) == 0
    again = {json.loads(line)["id"]: json.loads(line) for line in out.read_text().splitlines()}
    assert len(out.read_text().splitlines()) == 3 and set(again) == {"a", "b", "c"}
    assert again["a"] == first[0] and again["b"]["error"] is None and again["b"]["metrics"]["clip-s"]
    assert again["c"]["error"] == "empty caption"  # still an error, still once


def test_answered_ids_are_digests_and_a_torn_line_is_cut(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "x", "error": null}\n{"id": "y", "error": "bad"}\n{"id": "z", "err')
    answered, dropped = AnsweredIds.read(out)
    assert ("x" in answered, "y" in answered, "z" in answered, "w" in answered) == (True, True, False, False)
    assert dropped == 0 and out.read_text().endswith('"bad"}\n')
    answered, dropped = AnsweredIds.read(out, retry_errors=True)
    assert ("x" in answered, "y" in answered, dropped) == (True, False, 1)
    assert out.read_text() == '{"id": "x", "error": null}\n'
    assert list(batched(iter(range(7)), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
