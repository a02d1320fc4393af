"""`capscope bench --json` gives the keys of docs/formats.md §7 (a small run; no timing asserts)."""
import json
import time

import pytest

from capscope.bench import speed
from capscope.cli import main


@pytest.mark.slow
def test_bench_json_has_the_contract_keys(capsys, tmp_path):
    plot = tmp_path / "rescore.png"
    code = main(["bench", "--json", "--device", "cpu", "--pairs", "2", "--rescore-runs", "3", "--batch-size", "2", "--metric", "hice",
                 "--region-sources", "", "--ray-workers", "0", "--plot", str(plot), "--caption-words", "80", "--repeats", "2",
                 "--precision", "fp32"])  # the precisions have tests of their own (tests/metrics/test_precision.py)
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"device", "clip_model", "word_encoding_speedup", "pairs_per_s", "naive_pairs_per_s",
            "rescore_ms", "peak_rss_mb"} <= set(result)
    for name in ("hice",):  # infometic is measured the same way; left out to keep this test short
        assert result["pairs_per_s"][name] > 0 and result["naive_pairs_per_s"][name] > 0
        assert set(result["rescore_ms"][name]) >= {"p50", "p95"}
    shared = result["details"]["shared_images"]
    assert shared["captions_per_image"] == 5 and shared["pairs_per_s"]["hice"] > 0
    assert result["details"]["repeats"] == 2
    assert 0 < result["details"]["naive_image_tower_share"]["hice"] < 1
    assert result["word_encoding_speedup"] > 0 and result["peak_rss_mb"] > 0
    assert plot.stat().st_size > 1000
    lengths = result["details"]["caption_length"]
    assert lengths["words_per_caption"]["80"] >= 80 > lengths["words_per_caption"]["short"]
    assert lengths["pairs_per_s"]["hice"]["80"] > 0 and lengths["windows_per_caption"]["hice"]["80"] > 1
    clicks = result["details"]["click_segment"]["classic"]  # the plain run's click segmenter
    assert clicks["fallback"] and clicks["clicks"] == 8 and clicks["click_ms_p50"] > 0
    assert clicks["naive_click_ms_p50"] > 0 and clicks["embedding_ms"] >= 0


def test_caption_words_must_be_counts(capsys):
    assert main(["bench", "--caption-words", "short"]) == 2
    assert "--caption-words takes word counts" in capsys.readouterr().err
    assert main(["bench", "--repeats", "0"]) == 2
    assert "--repeats must be at least 1, not 0" in capsys.readouterr().err
    assert main(["bench", "--click-segmenters", "grabcut"]) == 2
    assert "--click-segmenters: unknown 'grabcut'" in capsys.readouterr().err


class SlowingScorer:
    """score_batch sleeps as long as the next of `seconds` says, per run of the pairs."""

    metrics: dict = {}

    def __init__(self, seconds: list[float], batches_per_run: int):
        self.seconds, self.batches_per_run, self.calls, self.aheads = seconds, batches_per_run, 0, []

    def score_batch(self, pairs, ahead=None):
        time.sleep(self.seconds[self.calls // self.batches_per_run] / self.batches_per_run)
        self.calls += 1
        self.aheads.append(ahead)
        return [{"error": None} for _ in pairs]


def test_pairs_per_second_is_the_best_of_its_repeats():
    scorer = SlowingScorer([0.30, 0.10, 0.20], batches_per_run=2)
    pairs = [{"id": str(i)} for i in range(4)]
    rate = speed.pairs_per_second(scorer, pairs, batch_size=2, repeats=3)
    assert scorer.calls == 6
    assert scorer.aheads == [pairs[2:], []] * 3  # each batch sees the next, as capscope score's do
    assert 4 / 0.10 * 0.8 < rate <= 4 / 0.10  # the 0.10 s run, not the mean (20 pairs/s)


@pytest.mark.slow
def test_bench_measures_clip4dm_against_the_released_loop(capsys):
    code = main(["bench", "--json", "--device", "cpu", "--pairs", "2", "--rescore-runs", "2", "--batch-size", "2",
                 "--metric", "clip4dm", "--captions-per-image", "1", "--region-sources", "", "--ray-workers", "0",
                 "--caption-words", "", "--repeats", "1", "--precision", "fp32"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["pairs_per_s"]["clip4dm"] > 0 and result["naive_pairs_per_s"]["clip4dm"] > 0
    assert "clip4dm" not in result["details"]["naive_image_tower_share"]  # one graph there: not split out
    assert result["details"]["rescore_breakdown_ms"]["clip4dm"]["text tower forward and backward"] > 0


def test_a_plain_bench_leaves_the_long_parts_out_and_says_so():
    """`capscope bench` with no flags ran past 15 minutes on 2 cores; now the long parts wait for their flags
    and the run names each one it left out, with the flag that adds it."""
    import argparse

    from capscope.cli import build_parser
    from capscope.commands.bench import LONG_PARTS, left_out

    bench = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["bench"]
    plain = left_out(bench.parse_args([]))
    assert len(plain) == len(LONG_PARTS) == 6
    assert "bf16 and fp16 against fp32 (--precision fp32,bf16,fp16)" in plain
    fuller = left_out(bench.parse_args(["--precision", "fp32,bf16", "--ray-workers", "2", "--caption-words", "80",
                                        "--click-segmenters", "classic,sam,sam2"]))
    assert [part.split(" (")[0] for part in fuller] == ["region sources on a 640 px image",
                                                        "CLIP-S alone at scale, with the host's ceiling"]
    result = {"device": "cpu", "clip_model": "x", "word_encoding_speedup": 2.0, "pairs_per_s": {},
              "naive_pairs_per_s": {}, "rescore_ms": {}, "peak_rss_mb": 1.0, "details": {"left_out": fuller}}
    assert speed.summary(result).splitlines()[-2:] == [f"left out: {part}" for part in fuller]
