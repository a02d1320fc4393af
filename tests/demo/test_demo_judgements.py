"""Demo-world judgements in the Flickr8k-Expert layout (`capscope demo-data --judgements`)."""
import json
import math
from collections import defaultdict

import numpy as np
import pytest

from capscope.cli import main
from capscope.demo import judgements
from capscope.demo.dataset import demo_scene
from capscope.demo.judgements import Graded, graded_caption, latent_quality, rate, scene_judgements, swap_wrong
from capscope.demo.demo_captions import caption_true, make_caption, phrases_true
from capscope.demo.scenes import Scene, Shape


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo-data", "--out", str(out), "--n", "40", "--seed", "5", "--judgements"]) == 0
    return out, json.loads((out / "judgements" / "flickr8k.json").read_text())


def rows(data):
    return [j for entry in data.values() for j in entry["human_judgement"]]


def test_layout_is_flickr8k_expert(written):
    out, data = written
    assert len(data) == 40
    for key, entry in data.items():
        assert entry["image_id"] == key and entry["image_path"] == f"images/{key}.png"
        image = out / "judgements" / "images" / f"{key}.png"    # PATH/images/ by file name, as the loaders read
        assert image.read_bytes() == (out / entry["image_path"]).read_bytes()
        assert 1 <= len(entry["ground_truth"]) <= judgements.N_REFERENCES
        by_caption = defaultdict(list)
        for j in entry["human_judgement"]:
            by_caption[j["caption"]].append(j)
            assert j["image_path"] == entry["image_path"]
            assert j["caption"] not in entry["ground_truth"]
            assert math.isnan(j["rating"]) or j["rating"] in (1.0, 2.0, 3.0, 4.0)
        for caption_rows in by_caption.values():     # one judgement per rater and caption
            assert [j["rater"] for j in caption_rows] == [0, 1, 2]
            assert len({j["wrong_words"] for j in caption_rows}) == 1


def test_ratings_fall_with_wrong_words_and_raters_differ(written):
    _, data = written
    table = [(j["wrong_words"], j["rater"], j["rating"]) for j in rows(data) if not math.isnan(j["rating"])]
    mean_by_wrong = [np.mean([r for w, _, r in table if w == k]) for k in range(4)]
    assert all(a > b for a, b in zip(mean_by_wrong, mean_by_wrong[1:])), mean_by_wrong
    mean_by_rater = [np.mean([r for _, who, r in table if who == k]) for k in range(3)]
    assert mean_by_rater[0] > mean_by_rater[2]
    assert {w for w, _, _ in table} == {0, 1, 2, 3}


def test_ties_and_missing_ratings(written):
    _, data = written
    ratings = [j["rating"] for j in rows(data)]
    missing = sum(math.isnan(r) for r in ratings)
    assert 0 < missing < 0.1 * len(ratings)
    assert len({r for r in ratings if not math.isnan(r)}) <= 4 < len(ratings)


def test_same_seed_same_file_other_seed_other(written):
    _, data = written
    assert scene_judgements(5, 7) == data["scene00007"]
    assert scene_judgements(6, 7)["human_judgement"] != data["scene00007"]["human_judgement"]


def test_swapped_words_make_the_caption_wrong():
    for index in range(15):
        scene = demo_scene(2, index)[0]
        rng = np.random.default_rng(index)
        for n_wrong in range(4):
            graded = graded_caption(scene, n_wrong, rng)
            if graded is None:
                continue
            assert len(set(graded.wrong)) == n_wrong
            assert phrases_true(graded.caption.phrases, scene.shapes) == (n_wrong == 0)
            for w in graded.wrong:
                assert graded.caption.words[w].role in ("size", "colour", "kind")


def test_swap_stops_when_no_word_is_left():
    scene = Scene([Shape("circle", "red", "small", (10, 10, 40, 40), (220, 30, 30))], (230, 230, 230), 0)
    rng = np.random.default_rng(0)
    graded = Graded(make_caption(scene, rng), ())
    assert caption_true(graded.caption, scene.shapes)
    n_words = sum(w.role in ("size", "colour", "kind") for w in graded.caption.words)
    for _ in range(n_words):
        graded = swap_wrong(graded, scene, rng)
    assert graded is not None and swap_wrong(graded, scene, rng) is None


def test_latent_quality_and_noiseless_raters_by_hand(monkeypatch):
    shapes = [Shape("circle", "red", "small", (10, 10, 40, 40), (220, 30, 30)),
              Shape("star", "blue", "large", (100, 100, 180, 180), (40, 70, 220))]
    scene = Scene(shapes, (230, 230, 230), 0)
    caption = make_caption(scene, np.random.default_rng(3))
    graded = Graded(caption, (0,))                     # one wrong word
    named = len(set(caption.referents))
    expected = 4 - 1 - judgements.UNMENTIONED_PENALTY * (1 - named / 2)
    assert latent_quality(graded, scene) == pytest.approx(expected)

    monkeypatch.setattr(judgements, "RATERS", ((0.0, 0.0), (-0.35, 0.0), (-0.7, 0.0)))
    monkeypatch.setattr(judgements, "MISSING_SHARE", 0.0)
    assert rate(2.7, np.random.default_rng(0)) == [3.0, 2.0, 2.0]     # 2.7, 2.35, 2.0 rounded
    assert rate(0.2, np.random.default_rng(0)) == [1.0, 1.0, 1.0]     # clipped to the scale
    monkeypatch.setattr(judgements, "MISSING_SHARE", 1.0)
    assert all(math.isnan(r) for r in rate(3.0, np.random.default_rng(0)))


def test_judgements_render_images_without_demo_data(tmp_path):
    counts = judgements.write_judgements(tmp_path, 2, 0, progress=False)
    assert counts["images"] == 2 and counts["judgements"] == 3 * counts["captions"]
    assert sorted(p.name for p in (tmp_path / "judgements" / "images").iterdir()) == ["scene00000.png", "scene00001.png"]
