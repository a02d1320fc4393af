"""Fine-tuning on a team's labels (`capscope train infometic --labels/--init`):
the split, the swapped copies, the shifted demo world, and a real fine-tune of
the bundled demo model on a shifted world that moves held-out figures up."""
import json
import math

import numpy as np
import pytest
import torch

from capscope.cli import main
from capscope.train.finetune import FinetuneError, figures_path, split_by_image, swapped_items
from capscope.demo.shifts import SHIFTS, shifted_pixels
from capscope.common.checksums import file_sha256
from capscope.metrics.words import decide_words
from capscope.common.jsonl import read_json_lines
from capscope.metrics.loading import demo_model_path


def item(image, labels=("correct",), regions=("mentioned",), caption="a red circle"):
    tokens = [{"text": w, "start": caption.index(w), "end": caption.index(w) + len(w), "semantic": i > 0,
               "label": (labels[i - 1] if i - 1 < len(labels) else None) if i > 0 else None}
              for i, w in enumerate(caption.split())]
    return {"id": f"{image}-{len(labels)}", "image": image, "caption": caption, "tokens": tokens,
            "regions": [{"box": [0, 0, 10, 10], "label": r} for r in regions]}


def test_split_keeps_each_image_on_one_side_and_is_fixed_by_the_seed():
    items = [item(f"im{i}.png", caption=c) for i in range(10) for c in ("a red circle", "a blue square")]
    split = split_by_image(items, 0.2, seed=3)
    assert len(split.held_images) == 2
    assert {i["image"] for i in split.held} == set(split.held_images)
    assert not {i["image"] for i in split.train} & set(split.held_images)
    assert split_by_image(items, 0.2, seed=3).held_images == split.held_images
    assert split_by_image(items, 0.2, seed=4).held_images != split.held_images


def test_unlabelled_items_are_left_out_and_too_few_is_an_error():
    unlabelled = item("a.png", labels=(None, None), regions=(None,))
    split = split_by_image([unlabelled, item("b.png"), item("c.png")], 0.5, seed=0)
    assert [i["image"] for i in split.train + split.held] != [] and unlabelled not in split.train + split.held
    with pytest.raises(FinetuneError, match="too few"):
        split_by_image([item("a.png")], 0.2, seed=0)
    with pytest.raises(FinetuneError, match="holdout"):
        split_by_image([item("a.png"), item("b.png")], 1.0, seed=0)


def test_a_swapped_copy_has_one_wrong_word_and_unknown_regions():
    items = [item("a.png", labels=("correct", "correct"), caption="a red circle"),
             item("b.png", labels=("correct", "correct"), caption="a blue square"),
             item("c.png", labels=("incorrect", "correct"), caption="a green star")]
    copies = swapped_items(items, np.random.default_rng(0), per_item=3)
    assert copies and all(c["image"] in ("a.png", "b.png") for c in copies)   # items with a wrong word are not copied
    for copy in copies:
        labels = [t["label"] for t in copy["tokens"] if t["semantic"]]
        assert labels.count("incorrect") == 1
        wrong = next(t for t in copy["tokens"] if t["label"] == "incorrect")
        assert copy["caption"][wrong["start"]:wrong["end"]] == wrong["text"]
        assert all(r["label"] is None for r in copy["regions"])


def test_a_swap_takes_a_word_seen_between_the_same_neighbours():
    items = [item(f"{k}.png", labels=("correct", "correct"), caption=c)
             for k, c in enumerate(("a red circle", "a red square", "a blue circle"))]
    copies = swapped_items(items, np.random.default_rng(0), per_item=20)
    from_first = {c["caption"] for c in copies if c["image"] == "0.png"}
    # "red" stood before "circle" beside "blue"; "circle" after "red" beside "square": never "a circle circle"
    assert from_first == {"a blue circle", "a red square"}


def test_a_word_alone_in_its_slot_takes_any_word_of_its_part_of_speech():
    items = [item("a.png", labels=("correct", "correct"), caption="a red circle"),
             item("b.png", labels=("correct", "correct"), caption="the big square")]
    copies = swapped_items(items, np.random.default_rng(0), per_item=20)
    swapped_in = {next(t["text"] for t in c["tokens"] if t["label"] == "incorrect") for c in copies}
    assert swapped_in <= {"red", "circle", "big", "square"} and len(swapped_in) > 1


@pytest.mark.parametrize("shift", SHIFTS)
def test_a_shift_changes_pixels_but_not_the_shapes_masks(shift):
    from capscope.demo.scenes import make_scene

    scene = make_scene(np.random.default_rng(1))
    pixels, masks = scene.render()
    shifted = shifted_pixels(shift, scene, pixels, masks, seed=0)
    assert shifted.shape == pixels.shape and shifted.dtype == np.uint8
    assert (shifted != pixels).any(axis=-1).mean() > 0.3
    if shift != "outline":
        for shape, mask in zip(scene.shapes, masks):
            assert (shifted[mask] == shape.rgb).all()
    with pytest.raises(ValueError, match="unknown shift"):
        shifted_pixels("sepia", scene, pixels, masks, seed=0)


@pytest.fixture(scope="module")
def dark_world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dark")
    assert main(["demo-data", "--out", str(folder), "--n", "90", "--seed", "4", "--shift", "dark"]) == 0
    return folder


@pytest.fixture(scope="module")
def finetuned(dark_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("child") / "child.pt"
    check = dark_world / "check.jsonl"   # image paths relative to the check file, as to a labels file
    check.write_text("".join(json.dumps(i) + "\n" for i in read_json_lines(dark_world / "captokeneval.jsonl")[:6]))
    code = main(["train", "infometic", "--labels", str(dark_world / "captokeneval.jsonl"), "--init", "demo",
                 "--out", str(out), "--steps", "120", "--threads", "2", "--holdout", "0.25",
                 "--replay-items", "100", "--check-gold", str(check), "--json"])
    assert code == 0
    return out


@pytest.mark.slow
def test_fine_tuning_on_a_shift_moves_held_out_figures_up(finetuned):
    report = json.loads(figures_path(finetuned).read_text())
    before, after = report["before"], report["after"]
    assert report["labels"]["held_out"]["items"] > 30
    assert after["incorrect_token_f1"] > before["incorrect_token_f1"]
    assert after["region_auroc"] > before["region_auroc"] + 0.03
    assert after["text_accuracy"] > before["text_accuracy"]


@pytest.mark.slow
def test_the_child_records_its_parent_and_labels_and_loads_through_the_scorer(finetuned, dark_world):
    from capscope.metrics.scorer import Scorer

    raw = torch.load(finetuned, map_location="cpu", weights_only=False)
    assert raw["parent"]["sha256"] == file_sha256(demo_model_path())
    assert raw["labels"]["source"] == "file"
    assert raw["labels"]["sha256"] == file_sha256(dark_world / "captokeneval.jsonl")
    assert raw["labels"]["train"]["items"] + raw["labels"]["held_out"]["items"] == 180
    assert raw["labels"]["replay"]["from"] == "demo" and raw["labels"]["replay"]["items"] == 100
    assert raw["training"]["keep_parent"] == 1.0
    assert raw["figures"]["after"] == json.loads(figures_path(finetuned).read_text())["after"]
    check = raw["figures"]["check_gold"]
    assert check["file"] == "check.jsonl" and check["before"]["n_items"] == check["after"]["n_items"] == 6
    assert {"text_accuracy", "incorrect_token_f1", "region_auroc"} <= set(check["before"]) & set(check["after"])
    scorer = Scorer(["infometic"], device="cpu", regions="given", infometic_checkpoint=str(finetuned))
    gold = read_json_lines(dark_world / "captokeneval.jsonl")[0]
    row = scorer.score(str(dark_world / gold["image"]), gold["caption"],
                       regions=[{"box": r["box"]} for r in gold["regions"]])
    assert row["model"]["checkpoints"]["infometic"]["sha256"] == file_sha256(finetuned)
    assert len(row["metrics"]["infometic"]["token_scores"]) == len(row["tokens"])


@pytest.mark.slow
def test_the_child_carries_the_word_threshold_scale_fitted_on_its_training_items(finetuned, dark_world):
    from capscope.metrics.scorer import Scorer

    report = json.loads(figures_path(finetuned).read_text())
    fit = report["word_threshold"]
    assert len(fit["f1"]) == 15 and fit["f1"][f"{fit['scale']:g}"] == max(fit["f1"].values())
    raw = torch.load(finetuned, map_location="cpu", weights_only=False)
    assert raw["word_threshold_scale"] == fit["scale"]
    scorer = Scorer(["infometic"], device="cpu", regions="given", infometic_checkpoint=str(finetuned),
                    token_rule="relative")
    assert scorer.word_threshold_scale("infometic") == fit["scale"]
    gold = read_json_lines(dark_world / "captokeneval.jsonl")[1]
    tokens = [{k: t[k] for k in ("text", "start", "end", "semantic")} for t in gold["tokens"]]
    row = scorer.score(str(dark_world / gold["image"]), gold["caption"], tokens=tokens,
                       regions=[{"box": r["box"]} for r in gold["regions"]])
    result = row["metrics"]["infometic"]
    semantic = [t["semantic"] for t in gold["tokens"]]
    assert result["token_correct"] == decide_words("relative", 0.1, semantic, result["token_scores"], fit["scale"])
    # the row says the scale its words were decided at (1, the rule's own threshold, goes unsaid)
    recorded = row["model"]["metric_options"].get("infometic", {}).get("word_threshold_scale", 1.0)
    assert recorded == fit["scale"]


@pytest.mark.slow
def test_a_bad_word_threshold_scale_is_a_clear_load_error(finetuned, tmp_path):
    from capscope.metrics.loading import ModelUnavailable
    from capscope.metrics.scorer import Scorer

    raw = torch.load(finetuned, map_location="cpu", weights_only=False)
    bad = tmp_path / "bad.pt"
    torch.save({**raw, "word_threshold_scale": -1}, bad)
    with pytest.raises(ModelUnavailable, match="word_threshold_scale must be a positive number"):
        Scorer(["infometic"], device="cpu", regions="given", infometic_checkpoint=str(bad))


def test_fine_tune_input_errors_are_user_errors(tmp_path, dark_world, capsys):
    labels = str(dark_world / "captokeneval.jsonl")
    out = str(tmp_path / "x.pt")
    assert main(["train", "infometic", "--labels", labels, "--out", out]) == 2
    assert "--init" in capsys.readouterr().err
    assert main(["train", "infometic", "--labels", labels, "--init", str(tmp_path / "no.pt"), "--out", out]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["train", "infometic", "--labels", str(tmp_path / "none.jsonl"), "--init", "demo", "--out", out]) == 2
    assert "no file" in capsys.readouterr().err
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(read_json_lines(labels)[0] | {"image": str(dark_world / "images/scene00000.png")}) + "\n")
    assert main(["train", "infometic", "--labels", str(one), "--init", "demo", "--out", out, "--steps", "1"]) == 2
    assert "too few" in capsys.readouterr().err
    assert main(["train", "infometic", "--labels", labels, "--init", "demo", "--out", out, "--steps", "1",
                 "--train", "head", "--augment"]) == 2
    assert "--train visual" in capsys.readouterr().err
    assert main(["train", "infometic", "--labels", labels, "--init", "demo", "--out", out, "--steps", "1",
                 "--check-gold", str(tmp_path / "none.jsonl")]) == 2
    assert "--check-gold: no file" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_the_image_tower_cut_in_two_computes_what_it_computed_whole():
    from capscope.train.finetune import VisualTop, load_parent

    model, *_ = load_parent(demo_model_path(), torch.device("cpu"))
    visual = model.clip_backbone.visual
    pixels = torch.randn(3, 3, 64, 64)
    whole = visual(pixels)
    for blocks in (1, 2, len(visual.transformer.resblocks)):
        cut = VisualTop(visual, blocks)
        assert torch.allclose(cut.top(cut.stem(pixels)), whole, atol=1e-5)
    assert len(VisualTop(visual, 2).parameters()) > len(VisualTop(visual, 1).parameters()) > 0
    with pytest.raises(FinetuneError, match="at least 1"):
        VisualTop(visual, 0)


def test_augment_changes_brightness_and_contrast_alike_for_a_crop_and_mirrors_its_boxes():
    from capscope.train.finetune import Augment, mirror_boxes, names_a_side

    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    as_pixels = lambda raw: (raw - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    raw = torch.rand(2, 3, 8, 8) * 0.5 + 0.2
    unchanged, mirrored = Augment(mean, std, strength=0.0, mirror=False)(as_pixels(raw), np.random.default_rng(0))
    assert not mirrored and torch.allclose(unchanged, as_pixels(raw), atol=1e-5)

    gray = torch.full((2, 3, 8, 8), 0.5)       # a flat image: contrast changes nothing, brightness scales it
    rng_seed = 3
    brightness, _contrast = np.random.default_rng(rng_seed).uniform(0.6, 1.4, size=2)
    changed, _ = Augment(mean, std, strength=0.4, mirror=False)(as_pixels(gray), np.random.default_rng(rng_seed))
    assert torch.allclose(changed, as_pixels(torch.full_like(gray, 0.5 * brightness)), atol=1e-5)

    flips = [Augment(mean, std, strength=0.0)(as_pixels(raw), np.random.default_rng(s)) for s in range(20)]
    assert 0 < sum(m for _, m in flips) < 20
    flipped = next(p for p, m in flips if m)
    assert torch.allclose(flipped, as_pixels(raw).flip(-1), atol=1e-5)

    assert names_a_side([{"caption": "a red star, left of a circle."}])
    assert not names_a_side([{"caption": "a bright star."}, {"caption": "leftover shapes"}])

    boxes = torch.tensor([[[10.0, 20.0, 30.0, 40.0], [0.0, 0.0, 100.0, 50.0]]])
    assert mirror_boxes(boxes, torch.tensor([[100.0, 50.0]])).tolist() == [[[70.0, 20.0, 90.0, 40.0],
                                                                            [0.0, 0.0, 100.0, 50.0]]]


def test_the_cut_fits_the_released_architecture_too():
    import open_clip

    from capscope.train.finetune import VisualTop

    visual = open_clip.create_model("ViT-B-32-quickgelu", pretrained=None).visual.eval()   # random weights
    pixels = torch.randn(2, 3, 224, 224)
    cut = VisualTop(visual, 2)
    with torch.no_grad():
        assert torch.allclose(cut.top(cut.stem(pixels)), visual(pixels), atol=1e-4)


def test_replay_items_come_from_the_parent_world_with_absolute_paths(dark_world, tmp_path):
    from pathlib import Path

    from capscope.train.finetune import replay_items, resolved_replay

    items = replay_items("demo", 6, seed=0, scratch=tmp_path)
    assert len(items) == 6 and all(Path(i["image"]).is_absolute() and Path(i["image"]).is_file() for i in items)
    from_file = replay_items(dark_world / "captokeneval.jsonl", 4, seed=0)
    assert [i["id"] for i in from_file] == [i["id"] for i in read_json_lines(dark_world / "captokeneval.jsonl")[:4]]
    assert replay_items(None, 10, seed=0) == []
    assert resolved_replay("auto", demo_model_path()) == "demo"
    assert resolved_replay("auto", tmp_path / "other.pt") is None
    assert resolved_replay("none", demo_model_path()) is None
    with pytest.raises(FinetuneError, match="no file"):
        replay_items(dark_world / "missing.jsonl", 3, seed=0)


def test_parent_loss_is_the_parents_kl_to_the_child_on_the_kept_rows_only():
    from capscope.train.finetune import parent_loss

    log = lambda rows: torch.tensor(rows).log()
    out = {"text_log_attention": log([[0.9, 0.1], [0.25, 0.75]]),
           "region_log_attention": log([[0.5, 0.5], [0.2, 0.8]])}
    second_row = (torch.tensor([1]), log([[0.5, 0.5]]), log([[0.2, 0.8]]))
    # text: 0.5 ln(0.5 / 0.25) + 0.5 ln(0.5 / 0.75); the regions agree
    assert parent_loss(out, second_row).item() == pytest.approx(0.143841, abs=1e-5)
    assert parent_loss(out, (torch.tensor([1]), out["text_log_attention"][1:], out["region_log_attention"][1:])).item() == 0
    assert parent_loss(out, None).item() == 0


def test_share_loss_weighs_every_labelled_word_the_same_unless_balanced():
    from capscope.train.finetune import UNKNOWN, share_loss

    # four semantic words (threshold min(0.1, 0.5 / 4) = 0.1), three correct at 0.3, one wrong at the threshold
    log_attention = torch.tensor([[0.3, 0.3, 0.3, 0.1]]).log()
    labels = torch.tensor([[1, 1, 1, 0]])
    correct, wrong = math.log(10 / 9), math.log(2)  # softplus(-2 ln 3), softplus(0)
    assert share_loss(log_attention, labels, "relative").item() == pytest.approx((3 * correct + wrong) / 4, abs=1e-5)
    assert share_loss(log_attention, labels, "relative", balanced=True).item() == pytest.approx(
        (correct + wrong) / 2, abs=1e-5)
    # an unknown piece counts as a word (five: threshold 0.1 all the same) but supervises nothing
    with_unknown = torch.tensor([[0.3, 0.3, 0.2, 0.1, 0.1]]).log()
    assert share_loss(with_unknown, torch.tensor([[1, 1, UNKNOWN, 0, UNKNOWN]]), "relative").item() == pytest.approx(
        (2 * correct + wrong) / 3, abs=1e-5)
    assert share_loss(log_attention, torch.full((1, 4), UNKNOWN), "relative").item() == 0


def test_the_fine_tuning_help_states_the_defaults_the_config_uses():
    import argparse
    import dataclasses
    import math
    import re

    from capscope.commands.demo import register_train_infometic
    from capscope.commands.finetuning import FINETUNE_TUNABLES
    from capscope.train.finetune import FinetuneConfig

    parser = argparse.ArgumentParser()
    register_train_infometic(parser.add_subparsers())
    helps = {action.dest: action.help or "" for sub in parser._subparsers._group_actions
             for choice in sub.choices.values() for action in choice._actions}
    defaults = {f.name: f.default for f in dataclasses.fields(FinetuneConfig)}
    for name in FINETUNE_TUNABLES:  # "default 0.05", "fine-tuning: 5e-4", ...
        if isinstance(defaults[name], bool):  # a flag
            assert defaults[name] is False and "default off" in helps[name], (name, helps[name])
            continue
        stated = [float(v) for v in re.findall(r"(?:default|fine-tuning:) ([0-9][0-9.e-]*)", helps[name])]
        assert any(math.isclose(v, defaults[name]) for v in stated), (name, defaults[name], helps[name])
