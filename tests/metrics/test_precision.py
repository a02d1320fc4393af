"""`--precision fp32|bf16|fp16`: every metric runs at each; bf16 and fp16 stay
within the stated tolerances of fp32 on demo scenes with capscope's trained demo
model; fp32 gives the rows it gave before precisions existed (to 1e-6 plus 1e-5
of the value, against rows saved from that code: tests/fixtures/fp32_demo_rows.json;
the relative part covers another CPU's kernels: an Intel Xeon with torch 2.14
differs from the AMD EPYC with torch 2.15 that saved them by up to 7.2e-6 on an
InfoCLIP score of -1.6); the row's
`model` block names the precision; every command takes the flag."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import open_clip
import pytest
import torch

from capscope.bench.speed import row_gaps, write_pairs_file
from frozen_scenes import make_pairs, make_shared_pairs
from capscope.cli import main
from capscope.metrics.scorer import Scorer

FIXTURE = Path(__file__).parents[1] / "fixtures" / "fp32_demo_rows.json"
DEMO_METRICS = ["clip-s", "infoclip", "infometic", "hice", "clip4dm"]
CLIP_S_TOLERANCE = 5e-3     # |d CLIP-S| at bf16 (the bound)
VERDICTS_KEPT = 0.99        # share of InfoMetIC word verdicts unchanged at bf16


def fixture_pairs() -> list[dict]:
    pairs = make_pairs(3, seed=21) + make_shared_pairs(2, captions_per_image=2, seed=22)
    for i, pair in enumerate(pairs):
        pair["id"] = f"p{i}"
    return pairs


@pytest.fixture(scope="module")
def demo_rows() -> dict[str, list[dict]]:
    pairs = make_pairs(16, seed=5)
    return {precision: Scorer(DEMO_METRICS, device="cpu", regions="given", precision=precision).score_batch(pairs)
            for precision in ("fp32", "bf16", "fp16")}


def flat(result: dict) -> np.ndarray:
    values = list(result["scores"].values()) + list(result.get("region_scores") or [])
    values += [np.nan if s is None else s for s in result.get("token_scores") or []]
    return np.asarray(values, dtype=np.float64)


def test_fp32_gives_the_rows_it_gave_before_precisions_existed():
    expected = json.loads(FIXTURE.read_text())
    rows = Scorer(DEMO_METRICS, device="cpu", regions="given", token_rule="paper").score_batch(fixture_pairs())
    assert rows[0]["model"]["demo"], "the fixture was made with the bundled demo model"
    for row in rows:
        assert row["model"]["precision"] == "fp32" and row["model"]["dtype"] == "float32"
        for metric, result in row["metrics"].items():
            before = expected[row["id"]][metric]
            a, b = flat(result), flat(before)
            assert a.shape == b.shape and np.array_equal(np.isnan(a), np.isnan(b)), metric
            excess = np.abs(a - b) - (1e-6 + 1e-5 * np.abs(b))
            assert np.nanmax(excess) <= 0, (metric, row["id"], np.nanmax(np.abs(a - b)))
            assert result["token_correct"] == before["token_correct"]
            assert result["region_mentioned"] == before["region_mentioned"]


@pytest.mark.slow
def test_bf16_and_fp16_stay_close_to_fp32_on_demo_scenes(demo_rows):
    base = demo_rows["fp32"]
    for precision in ("bf16", "fp16"):
        rows = demo_rows[precision]
        assert all(not r["error"] for r in rows)
        model = rows[0]["model"]
        assert model["precision"] == precision
        assert model["dtype"] == f"float32, {'bfloat16' if precision == 'bf16' else 'float16'} autocast"
        clip_s = row_gaps([r["metrics"]["clip-s"] for r in base], [r["metrics"]["clip-s"] for r in rows])
        assert 0 < clip_s["max_abs_score_diff"]["clip_s"] <= CLIP_S_TOLERANCE  # it did run at another precision
        words = row_gaps([r["metrics"]["infometic"] for r in base], [r["metrics"]["infometic"] for r in rows])
        assert words["verdicts"] > 100 and words["verdicts_changed_share"] <= 1 - VERDICTS_KEPT
        for metric in ("hice", "clip4dm", "infoclip"):
            gaps = row_gaps([r["metrics"][metric] for r in base], [r["metrics"][metric] for r in rows])
            assert gaps["verdicts_changed_share"] <= 0.05, (precision, metric, gaps)


@pytest.mark.slow
def test_each_precision_runs_pac_s_too(tmp_path):
    torch.manual_seed(3)
    checkpoint = tmp_path / "pacs.pth"
    torch.save({"state_dict": open_clip.create_model("ViT-B-32-quickgelu", pretrained=None).state_dict()}, checkpoint)
    pairs = make_pairs(2, seed=8)
    for pair in pairs:
        pair["references"] = ["a shape on a plain background"]
    scores = {}
    for precision in ("fp32", "bf16", "fp16"):
        row = Scorer(["pac-s"], device="cpu", regions="given", pacs_checkpoint=str(checkpoint),
                     precision=precision).score_batch(pairs)[0]
        assert row["model"]["precision"] == precision
        scores[precision] = row["metrics"]["pac-s"]["scores"]
    assert set(scores["bf16"]) == set(scores["fp32"]) == {"pac_s", "ref_pac_s"}


def test_the_commands_take_precision(tmp_path, capsys):
    write_pairs_file(make_pairs(2, seed=9), tmp_path / "pairs.jsonl")
    out = tmp_path / "scored.jsonl"
    assert main(["score", "--input", str(tmp_path / "pairs.jsonl"), "--output", str(out), "--metric", "clip-s",
                 "--regions", "given", "--precision", "bf16", "--demo"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["model"]["precision"] for r in rows] == ["bf16", "bf16"]
    with pytest.raises(SystemExit) as exit_info:
        main(["score", "--input", str(tmp_path / "pairs.jsonl"), "--output", str(out), "--precision", "fp8"])
    assert exit_info.value.code == 2 and "invalid choice: 'fp8'" in capsys.readouterr().err
    for command in (["features"], ["correlate"], ["evaluate"], ["serve"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        assert "--precision {fp32,bf16,fp16}" in capsys.readouterr().out, command
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        Scorer(["clip-s"], device="cpu", precision="fp8")


def test_the_server_scores_at_its_precision(tmp_path):
    from capscope.server.api import create_app
    from capscope.server.scoring import Models

    app = create_app(f"sqlite:///{tmp_path / 'p.db'}", precision="bf16")
    assert app.state.models.factory.keywords["config"].precision == "bf16"
    with pytest.raises(ValueError, match="unknown precision"):
        Models(precision="fp8")
