"""`capscope evaluate` (docs/formats.md §6): the contract's keys, both token rules,
FOIL pairing, and the shipped demo model against the issue's bars."""
import json

import pytest
import torch

from capscope.bench.evaluate import CONTRACT_KEYS, decisions_under
from capscope.metrics.verdict import Verdict
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
    from capscope.train.infometic_setup import InfoTrainConfig
    from capscope.train.infometic_trainer import train_infometic

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

    from capscope.commands.demo import scorer_for
    from capscope.train.infometic_setup import DEMO_CROP

    args = Namespace(metric="hice", device="cpu", clip_model="capscope-demo-clip",
                     clip_pretrained=str(tiny_checkpoint / "demo_clip.pt"), infometic_checkpoint=None, beta=0.1,
                     token_rule="paper", clip4dm_epsilon=-5e-5, clip4dm_layers=3, precision="fp32")
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
    assert not any(decisions_under(Verdict("paper", 0.1, 1.0), item, prediction, "infometic"))      # 1/12 < 0.1: all flagged
    assert all(decisions_under(Verdict("relative", 0.1, 1.0), item, prediction, "infometic"))


@pytest.fixture(scope="module")
def fresh_scenes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fresh")
    assert main(["demo-data", "--out", str(folder), "--n", "80", "--seed", "4242"]) == 0
    return folder


@pytest.mark.slow
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
@pytest.mark.slow  # over 1.8 s here: the fast lane keeps under 5 minutes
def test_hice_on_the_demo_clip_ranks_regions_and_words(fresh_scenes, capsys, monkeypatch):
    """HICE-S on the demo model (--demo), its region crops in the demo CLIP's own style
    (0.93 region AUROC and 0.79 word AUROC on 300 held-out scenes before they were)."""
    from capscope.metrics import loading

    def offline(*args, **kwargs):  # as on a machine where no pretrained CLIP can be had, whatever its cache holds
        raise loading.ModelUnavailable("CLIP: offline")

    monkeypatch.setattr(loading, "create_open_clip", offline)
    monkeypatch.delenv("CAPSCOPE_NO_DEMO", raising=False)
    capsys.readouterr()
    code = main(["evaluate", "--gold", str(fresh_scenes / "captokeneval.jsonl"), "--metric", "hice", "--json",
                 "--device", "cpu", "--demo"])
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


def test_the_fitted_word_scale_is_the_best_f1_with_ties_going_towards_1(tmp_path):
    from capscope.bench.evaluate import fit_word_scale, figures_of

    # ten semantic words: the relative rule's threshold is 0.05. Two wrong words at 0.02, two correct ones
    # at 0.04: at scale 1 all four are flagged (F1 2/3); from 0.4 to 0.75 only the wrong ones (F1 1);
    # below 0.4 none (F1 0). The tie goes to 0.75.
    scores = [0.02, 0.02, 0.04, 0.04] + [0.2] * 6
    labels = ["incorrect"] * 2 + ["correct"] * 8
    item = {"id": "a", "image": "x.png", "caption": " ".join("w" * 10), "regions": [],
            "tokens": [{"text": "w", "start": 2 * i, "end": 2 * i + 1, "semantic": True, "label": label}
                       for i, label in enumerate(labels)]}

    class FixedScorer:
        def score_batch(self, rows, base_dir=None):
            return [{"metrics": {"infometic": {"token_scores": scores, "region_scores": []}}} for _ in rows]

    fit = fit_word_scale(FixedScorer(), [item], tmp_path, token_rule="relative", beta=0.1)
    assert fit["scale"] == 0.75
    assert fit["f1"]["1"] == pytest.approx(2 / 3, abs=1e-4) and fit["f1"]["0.4"] == 1.0 and fit["f1"]["0.35"] == 0.0
    prediction = {"token_scores": scores, "region_scores": [], "scores": {}}
    assert figures_of([item], [prediction], [], "infometic", token_rule="relative", beta=0.1,
                      word_scale=0.75)["incorrect_token_f1"] == 1.0


# ---------------------------------------------------------------- gold masks

@pytest.fixture(scope="module")
def masked_gold(tmp_path_factory):
    """One item: a small blue square in the corner of a large red region's box,
    the red region's mask (most of the box) and the square's (a 16th of its box)."""
    import numpy as np
    from PIL import Image

    from capscope.demo.clip_model import new_demo_clip, save_demo_clip
    from capscope.metrics.regions import mask_to_rle

    folder = tmp_path_factory.mktemp("masked")
    torch.manual_seed(0)
    save_demo_clip(new_demo_clip(), folder / "demo_clip.pt")
    pixels = np.full((96, 96, 3), 255, dtype=np.uint8)
    pixels[8:88, 8:88] = (220, 30, 30)      # a large red square
    pixels[12:32, 12:32] = (30, 30, 220)    # a small blue one inside its corner
    Image.fromarray(pixels).save(folder / "scene.png")
    square = np.zeros((96, 96), dtype=bool)
    square[12:32, 12:32] = True
    red = np.zeros((96, 96), dtype=bool)
    red[8:88, 8:88] = True
    red &= ~square
    caption = "a small blue square on a large red square."
    words = caption.rstrip(".").split()
    tokens, start = [], 0
    for word in words:
        tokens.append({"text": word, "start": start, "end": start + len(word), "semantic": word not in ("a", "on"),
                       "label": "correct"})
        start += len(word) + 1
    item = {"id": "masked", "image": "scene.png", "caption": caption, "tokens": tokens, "regions": [
        {"box": [8, 8, 88, 88], "mask": mask_to_rle(square), "label": "mentioned"},   # mask 400 px of a 6400 px box
        {"box": [8, 8, 88, 88], "mask": mask_to_rle(red), "label": "mentioned"},
    ]}
    boxes = {**item, "id": "boxes", "regions": [{k: v for k, v in r.items() if k != "mask"} for r in item["regions"]]}
    (folder / "masks.jsonl").write_text(json.dumps(item) + "\n")
    (folder / "boxes.jsonl").write_text(json.dumps(boxes) + "\n")
    (folder / "mixed.jsonl").write_text(json.dumps({**item, "regions": [item["regions"][0], boxes["regions"][1]]})
                                        + "\n")
    return folder


def _evaluate_args(folder, gold, metric="hice", json_out=True):
    args = ["evaluate", "--gold", str(folder / gold), "--metric", metric, "--device", "cpu",
            "--clip-model", "capscope-demo-clip", "--clip-pretrained", str(folder / "demo_clip.pt")]
    return args + (["--json"] if json_out else [])


def test_gold_masks_are_scored_as_masks_and_the_output_says_so(masked_gold, capsys):
    """HICE-S's region scores come from the gold masks where the file has them:
    a region whose mask is a 16th of its box scores otherwise than its box
    alone (two regions with one box score alike without their masks)."""
    from argparse import Namespace

    from capscope.bench.evaluate import predict, read_gold
    from capscope.commands.demo import scorer_for

    args = Namespace(metric="hice", device="cpu", clip_model="capscope-demo-clip",
                     clip_pretrained=str(masked_gold / "demo_clip.pt"), infometic_checkpoint=None, beta=0.1,
                     token_rule="paper", clip4dm_epsilon=-5e-5, clip4dm_layers=3, precision="fp32")
    scorer = scorer_for(args)
    scores = {}
    for name in ("masks", "boxes"):
        (prediction,), errors = predict(scorer, "hice", read_gold(masked_gold / f"{name}.jsonl"), masked_gold)
        assert errors == []
        scores[name] = prediction["region_scores"]
    assert scores["boxes"][0] == pytest.approx(scores["boxes"][1], abs=1e-6)   # the same box twice
    assert abs(scores["masks"][0] - scores["masks"][1]) > 1e-3                 # two masks in it
    assert abs(scores["masks"][0] - scores["boxes"][0]) > 1e-3                 # the small square's mask, not its box

    expected = {"masks.jsonl": "masks", "boxes.jsonl": "boxes", "mixed.jsonl": "masks and boxes"}
    for gold, regions_from in expected.items():
        assert main(_evaluate_args(masked_gold, gold)) == 0
        figures = json.loads(capsys.readouterr().out)
        assert figures["n_errors"] == 0 and figures["regions_from"] == regions_from
    assert main(_evaluate_args(masked_gold, "masks.jsonl", json_out=False)) == 0
    assert "regions scored on the gold masks\n" in capsys.readouterr().out


def test_regions_from_names_what_each_metric_reads():
    from capscope.bench.evaluate import regions_from, scorer_row

    rle = {"size": [4, 4], "counts": "04"}
    mixed = [{"regions": [{"box": [0, 0, 2, 2], "mask": rle}, {"box": [0, 0, 2, 2], "mask": None}]}]
    masked = [{"regions": [{"box": [0, 0, 2, 2], "mask": rle}]}]
    assert regions_from(mixed, "hice") == "masks and boxes" and regions_from(masked, "hice") == "masks"
    assert regions_from(masked, "infometic") == "boxes"    # InfoMetIC crops boxes: a mask changes nothing
    assert regions_from(masked, "clip-s") is None and regions_from([{"regions": []}], "hice") is None
    row = scorer_row({"id": "x", "image": "a.png", "caption": "a", "tokens": [], **mixed[0]})
    assert row["regions"] == [{"box": [0, 0, 2, 2], "mask": rle}, {"box": [0, 0, 2, 2]}]


def test_a_gold_mask_of_the_wrong_size_fails_its_item(masked_gold, capsys, tmp_path):
    item = json.loads((masked_gold / "masks.jsonl").read_text())
    item["regions"][0]["mask"]["size"] = [10, 10]
    (masked_gold / "wrong.jsonl").write_text(json.dumps(item) + "\n")
    assert main(_evaluate_args(masked_gold, "wrong.jsonl")) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["n_errors"] == 1
    assert "region 0: mask size [10, 10] differs from the image's [96, 96]" in figures["first_error"]
