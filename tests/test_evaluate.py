"""`capscope evaluate` (docs/formats.md §6): the contract's keys, both token rules,
FOIL pairing, and the shipped demo model against the issue's bars."""
import json

import pytest
import torch

from capscope.bench.evaluate import CONTRACT_KEYS, decisions_under
from capscope.cli import main
from capscope.metrics.loading import demo_model_path


@pytest.fixture(scope="module")
def gold_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gold")
    assert main(["demo-data", "--out", str(folder), "--n", "4", "--seed", "77"]) == 0
    return folder


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from capscope.demo.clip_model import new_demo_clip, save_demo_clip
    from capscope.demo.train_infometic import InfoTrainConfig, train_infometic

    folder = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    save_demo_clip(new_demo_clip(), folder / "demo_clip.pt")
    config = InfoTrainConfig(out=folder / "head.pt", clip=folder / "demo_clip.pt", demo_scenes=12, batch_size=4,
                             minutes=None, steps=1, threads=1, progress=False, intra_layers=1, inter_layers=1)
    train_infometic(config)
    return folder


def test_json_has_the_contract_keys(gold_dir, tiny_checkpoint, capsys):
    code = main(["evaluate", "--gold", str(gold_dir / "captokeneval.jsonl"), "--metric", "infometic", "--json",
                 "--device", "cpu", "--infometic-checkpoint", str(tiny_checkpoint / "head.pt")])
    assert code == 0
    figures = json.loads(capsys.readouterr().out)
    assert set(CONTRACT_KEYS) <= set(figures)
    assert figures["metric"] == "infometic" and figures["n_items"] == 8
    assert set(figures["token_rules"]) == {"paper", "relative"}
    assert figures["foil"]["n_pairs"] == 4
    assert figures["trivial"]["incorrect_token_f1"] == 0.0
    assert figures["n_errors"] == 0


def test_infoclip_on_the_demo_clip(gold_dir, tiny_checkpoint, capsys):
    code = main(["evaluate", "--gold", str(gold_dir / "captokeneval.jsonl"), "--metric", "infoclip", "--json",
                 "--device", "cpu", "--clip-model", "capscope-demo-clip",
                 "--clip-pretrained", str(tiny_checkpoint / "demo_clip.pt")])
    assert code == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["n_errors"] == 0 and figures["vision_accuracy"] is not None


def test_a_demo_clip_gets_the_crops_it_was_trained_on(tiny_checkpoint):
    from argparse import Namespace

    from capscope.cmd_demo import scorer_for
    from capscope.demo.train_infometic import DEMO_CROP

    args = Namespace(metric="hice", device="cpu", clip_model="capscope-demo-clip",
                     clip_pretrained=str(tiny_checkpoint / "demo_clip.pt"), infometic_checkpoint=None, beta=0.1,
                     token_rule="paper", clip4dm_epsilon=-5e-5, clip4dm_layers=3)
    crop = scorer_for(args).metrics["hice"].clip.crop
    assert (crop.margin, crop.canvas) == (DEMO_CROP["margin"], DEMO_CROP["canvas"])


def test_missing_gold_is_a_user_error(tmp_path, capsys):
    assert main(["evaluate", "--gold", str(tmp_path / "none.jsonl"), "--metric", "infometic"]) == 2
    assert "no file" in capsys.readouterr().err


def test_token_rules_differ_on_long_captions():
    words = "a b c d e f g h i j k l".split()
    caption = " ".join(words)
    tokens, start = [], 0
    for w in words:
        tokens.append({"text": w, "start": start, "end": start + 1, "semantic": True})
        start += 2
    share = 1 / len(words)
    prediction = {"token_scores": [share] * len(words),
                  "pieces": [{"text": w, "token": i, "score": share} for i, w in enumerate(words)]}
    item = {"caption": caption, "tokens": tokens}
    assert not any(decisions_under("paper", 0.1, item, prediction))      # 1/12 < 0.1: all flagged
    assert all(decisions_under("relative", 0.1, item, prediction))


@pytest.fixture(scope="module")
def fresh_scenes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fresh")
    assert main(["demo-data", "--out", str(folder), "--n", "80", "--seed", "4242"]) == 0
    return folder


@pytest.mark.skipif(not demo_model_path().is_file(), reason="the demo model is not shipped yet")
def test_shipped_demo_model_meets_the_bars(fresh_scenes, capsys):
    tmp_path = fresh_scenes
    capsys.readouterr()
    code = main(["evaluate", "--gold", str(tmp_path / "captokeneval.jsonl"), "--metric", "infometic", "--json",
                 "--device", "cpu", "--token-rule", "relative", "--infometic-checkpoint", str(demo_model_path())])
    assert code == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["vision_accuracy"] >= 0.90 and figures["region_auroc"] >= 0.95
    assert figures["text_accuracy"] >= 0.95 and figures["incorrect_token_f1"] >= 0.75
    assert figures["foil"]["foil_accuracy"] >= 0.90


@pytest.mark.skipif(not demo_model_path().is_file(), reason="the demo model is not shipped yet")
def test_hice_on_the_demo_clip_ranks_regions_and_words(fresh_scenes, capsys, monkeypatch):
    """HICE-S through the demo fallback, its region crops in the demo CLIP's own style
    (0.93 region AUROC and 0.79 word AUROC on 300 held-out scenes before they were)."""
    from capscope.metrics import loading

    def offline(*args, **kwargs):  # as on a machine where no pretrained CLIP can be had, whatever its cache holds
        raise loading.ModelUnavailable("CLIP: offline")

    monkeypatch.setattr(loading, "create_open_clip", offline)
    monkeypatch.delenv("CAPSCOPE_NO_DEMO", raising=False)
    capsys.readouterr()
    code = main(["evaluate", "--gold", str(fresh_scenes / "captokeneval.jsonl"), "--metric", "hice", "--json",
                 "--device", "cpu"])
    assert code == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["region_auroc"] >= 0.97 and figures["incorrect_token_auroc"] >= 0.85
    assert figures["vision_accuracy"] >= 0.85 and figures["foil"]["foil_accuracy"] >= 0.75


def test_several_metrics_are_predicted_from_one_scoring_pass(tmp_path):
    from capscope.bench.evaluate import predict_many

    class CountingScorer:
        batches = 0

        def score_batch(self, rows, base_dir=None):
            CountingScorer.batches += 1
            return [{"metrics": {"a": {"scores": {"x": 1.0}}} if row["id"] != "bad" else {}, "error": "no image"}
                    for row in rows]

    items = [{"id": i, "image": "x.png", "caption": "a cat", "tokens": [], "regions": []} for i in ("1", "bad", "3")]
    out = predict_many(CountingScorer(), ["a", "b"], items, tmp_path, batch_size=2)
    assert CountingScorer.batches == 2  # 3 items in batches of 2, once for both metrics
    assert out["a"][0] == [{"scores": {"x": 1.0}}, {}, {"scores": {"x": 1.0}}] and out["a"][1] == ["bad: no image"]
    assert out["b"][0] == [{}, {}, {}] and len(out["b"][1]) == 3
