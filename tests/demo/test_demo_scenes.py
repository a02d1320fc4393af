"""The demo world follows docs/formats.md §9 and is deterministic for a seed."""
import json

import numpy as np
import pytest
from PIL import Image

from capscope.demo import demo_captions as captions, scenes
from capscope.demo.dataset import demo_scene, token_rows, write_demo_data

SEED = 7
N = 40


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    write_demo_data(out, N, SEED, progress=False)
    return out


def read_jsonl(path):
    return [json.loads(line) for line in open(path)]


def test_same_seed_same_files(demo_dir, tmp_path):
    write_demo_data(tmp_path, N, SEED, progress=False)
    for name in ("captokeneval.jsonl", "train.jsonl", "images/scene00003.png"):
        assert (tmp_path / name).read_bytes() == (demo_dir / name).read_bytes()


def test_other_seed_other_scenes():
    a, b = demo_scene(1, 0)[0], demo_scene(2, 0)[0]
    assert a.shapes != b.shapes


def test_scenes_follow_the_contract():
    for index in range(60):
        scene = demo_scene(SEED, index)[0]
        pixels, masks = scene.render()
        assert pixels.shape == (224, 224, 3) and pixels.dtype == np.uint8
        assert all(200 <= c <= 255 for c in scene.background)
        assert 1 <= len(scene.shapes) <= 4
        for shape, mask in zip(scene.shapes, masks):
            lo, hi = scenes.SIZES[shape.size]
            ys, xs = np.nonzero(mask)
            assert lo <= xs.max() + 1 - xs.min() <= hi and lo <= ys.max() + 1 - ys.min() <= hi
            assert shape.kind in scenes.KINDS
            base = np.array(scenes.COLOURS[shape.colour])
            assert np.abs(np.array(shape.rgb) - base).max() <= 20
            assert (pixels[mask] == shape.rgb).all()
        total = np.sum(masks, axis=0)
        assert total.max() <= 1, "shapes overlap"


def test_tokens_and_labels(demo_dir):
    items = read_jsonl(demo_dir / "captokeneval.jsonl")
    assert len(items) == 2 * N
    for item in items:
        caption = item["caption"]
        for token in item["tokens"]:
            assert caption[token["start"]:token["end"]] == token["text"]
            assert (token["label"] is None) == (not token["semantic"])
        wrong = [t for t in item["tokens"] if t["label"] == "incorrect"]
        assert len(wrong) == (1 if item["polluted"] else 0)
        assert len(item["regions"]) <= 20


def test_scene_words_are_semantic_and_glue_is_not():
    clean = demo_scene(SEED, 0)[1]
    rows = {r["text"]: r["semantic"] for r in token_rows(clean)}
    for word, role in ((w.text, w.role) for w in clean.words):
        if role in scenes.ATTRIBUTES:
            assert rows[word], word
        if word in {"a", "an", "and", ".", ","}:
            assert not rows[word], word


def test_pollution_swaps_one_word_and_makes_it_wrong():
    binding = 0
    for index in range(200):
        scene, clean, polluted, _ = demo_scene(SEED, index)
        changed = [i for i, (a, b) in enumerate(zip(clean.words, polluted.words))
                   if a.text != b.text and a.role != "article"]
        assert changed == [polluted.wrong_word]
        word = polluted.words[polluted.wrong_word]
        assert word.role in scenes.ATTRIBUTES
        assert captions.caption_true(clean, scene.shapes)
        assert not captions.caption_true(polluted, scene.shapes)
        wrong_phrase = polluted.phrases[word.phrase]
        assert not any(wrong_phrase.matches(s) for s in scene.shapes)
        binding += any(getattr(s, word.role) == word.text for s in scene.shapes)
    assert 0.2 < binding / 200 < 0.8


def test_masks_decode_and_region_labels(demo_dir):
    from pycocotools import mask as mask_utils

    items = {it["id"]: it for it in read_jsonl(demo_dir / "captokeneval.jsonl")}
    item = items["scene00000-clean"]
    image = Image.open(demo_dir / item["image"])
    assert image.size == (224, 224)
    shapes = [r for r in item["regions"] if r["mask"] is not None]
    assert shapes
    for region in shapes:
        mask = mask_utils.decode({"size": region["mask"]["size"], "counts": region["mask"]["counts"].encode()})
        ys, xs = np.nonzero(mask)
        assert [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1] == region["box"]
    for item in items.values():
        labels = [r["label"] for r in item["regions"]]
        assert "mentioned" in labels or item["polluted"]
        if not item["polluted"]:
            assert None not in labels


def test_training_file_grounds_phrases(demo_dir):
    for row in read_jsonl(demo_dir / "train.jsonl"):
        assert row["boxes"]
        for box in row["boxes"]:
            assert row["caption"][box["start"]:box["end"]] == box["phrase"]
        for negative in row["negatives"]:
            for wrong in negative["wrong"]:
                assert negative["caption"][wrong["start"]:wrong["end"]] == wrong["text"]


def test_padded_crop_keeps_true_scale():
    scene = demo_scene(SEED, 3)[0]
    shape = scene.shapes[0]
    crop = scenes.padded_crop(scene.image(), shape.box, canvas=128)
    assert crop.size == (128, 128)
    side = shape.box[2] - shape.box[0]
    coloured = (np.abs(np.asarray(crop).astype(int) - shape.rgb).max(axis=2) == 0)
    ys, xs = np.nonzero(coloured)
    assert xs.max() + 1 - xs.min() == side


def test_training_file_reads_back(demo_dir, tmp_path):
    from capscope.train.training_data import TrainingDataError, read_training_file

    pairs = read_training_file(demo_dir / "train.jsonl")
    assert len(pairs) == N and pairs[0].image == demo_dir / "images/scene00000.png"
    assert pairs[0].negatives[0].wrong and pairs[0].regions
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"image": "x.png", "caption": "a dog", "boxes": [{"box": [0,0,5,5], "phrase": "cat", "start": 2, "end": 5}]}\n')
    with pytest.raises(TrainingDataError, match="bad.jsonl:1"):
        read_training_file(bad)


def test_every_caption_can_be_polluted():
    # a colourless "a triangle" in a scene holding every kind has no wrong twin
    every_kind = [scenes.Shape(k, c, "small", (i * 50, 0, i * 50 + 30, 30), (0, 0, 0))
                  for i, (k, c) in enumerate(zip(scenes.KINDS, ("red", "green", "blue", "yellow")))]
    scene = scenes.Scene(every_kind, (230, 230, 230), 0)
    bare = captions.Caption((captions.Word("a", "article", 0), captions.Word("triangle", "kind", 0), captions.Word(".")),
                            (captions.Phrase("triangle"),), (2,))
    assert captions.pollution_options(bare, scene) == ([], [])
    for index in range(300):
        captions.pollute(captions.make_caption(scene, scenes.scene_rng(0, index)), scene,
                         scenes.scene_rng(1, index))
