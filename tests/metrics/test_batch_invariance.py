"""The same pair gets the same numbers whatever it is batched with: every
metric scores each pair alone, then inside batches of other sizes, other
neighbours and other positions, and with the next batch as look-ahead (its
images in a pass's spare rows), cold caches each time, to 1e-6 on the global
scores, the token scores and the region scores; long captions too."""
from __future__ import annotations

import numpy as np
import open_clip
import pytest
import torch

from capscope.bench.speed import make_long_pairs, make_pairs, make_shared_pairs, model_files
from capscope.metrics import image_cache
from capscope.metrics.scorer import Scorer

TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def scorer(tmp_path_factory, clip_checkpoint):
    folder = tmp_path_factory.mktemp("invariance")
    files = model_files(folder, ("infometic",))["infometic"]
    torch.manual_seed(2)
    pacs = folder / "pacs.pth"
    torch.save({"state_dict": open_clip.create_model("ViT-B-32-quickgelu", pretrained=None).state_dict()}, pacs)
    return Scorer(["clip-s", "pac-s", "infoclip", "infometic", "hice", "clip4dm"], device="cpu", regions="given",
                  clip_model="ViT-B-32", clip_pretrained=str(clip_checkpoint), pacs_checkpoint=str(pacs), **files)


def numbers(result: dict) -> np.ndarray:
    values = list(result["scores"].values()) + list(result["region_scores"])
    values += [np.nan if s is None else s for s in result["token_scores"]]
    return np.asarray(values, dtype=np.float64)


def scored(scorer, pairs: list[dict], batch_size: int, look_ahead: bool = False) -> dict[str, dict]:
    for metric in scorer.metrics.values():
        metric.backbone.clear_caches()
    rows = {}
    for start in range(0, len(pairs), batch_size):
        ahead = pairs[start + batch_size : start + 2 * batch_size] if look_ahead else None
        for row in scorer.score_batch(pairs[start : start + batch_size], ahead=ahead):
            assert row["error"] is None, row["error"]
            rows[row["id"]] = row
    return rows


@pytest.mark.slow
def test_every_metric_gives_a_pair_the_same_numbers_in_any_batch(scorer, monkeypatch):
    filled = []  # images of the look-ahead that took a pass's spare rows
    spare_fill = image_cache.spare_fill

    def counted_fill(*args):
        chosen = spare_fill(*args)
        filled.extend(chosen)
        return chosen

    monkeypatch.setattr(image_cache, "spare_fill", counted_fill)
    # and two long captions, read in windows (InfoMetIC's go through its head 8 to a pass on a CPU)
    pairs = make_pairs(3, seed=11) + make_shared_pairs(2, captions_per_image=2, seed=12) + make_long_pairs(2, 70, seed=13)
    for i, pair in enumerate(pairs):
        pair["id"] = f"p{i}"
    alone = scored(scorer, pairs, 1)
    for order, size, look_ahead in ((pairs[::-1], 2, False), (pairs[2:] + pairs[:2], len(pairs), False),
                                    (pairs, 3, True)):
        together = scored(scorer, order, size, look_ahead)
        for pair_id, row in alone.items():
            for metric, result in row["metrics"].items():
                other = together[pair_id]["metrics"][metric]
                a, b = numbers(result), numbers(other)
                assert a.shape == b.shape and np.array_equal(np.isnan(a), np.isnan(b))
                gap = np.nanmax(np.abs(a - b)) if a.size else 0.0
                assert gap <= TOLERANCE, (metric, pair_id, size, gap)
                assert result["token_correct"] == other["token_correct"]
                assert result["region_mentioned"] == other["region_mentioned"]
    assert filled, "no look-ahead image took a spare row: the look-ahead configuration tested nothing"
