"""The pairs `capscope bench` times are demo-world scenes (demo.scenes), and
`capscope.bench.speed` still offers the names its callers import."""
import numpy as np

from capscope.bench import speed
from capscope.demo.scenes import COLOURS, IMAGE_SIDE, KINDS


def test_a_pair_is_a_demo_scene_whose_shapes_are_the_regions():
    pairs = speed.make_pairs(20, seed=4)
    assert [p["caption"] for p in pairs] == [p["caption"] for p in speed.make_pairs(20, seed=4)]
    words = {w.strip(".,:") for p in pairs for w in p["caption"].split()}
    assert words & set(KINDS) and words & set(COLOURS)
    for pair in pairs:
        assert pair["image"].size == (IMAGE_SIDE, IMAGE_SIDE)
        assert 1 <= len(pair["regions"]) <= 4
        for region in pair["regions"]:
            x0, y0, x1, y1 = region["box"]
            assert 0 <= x0 < x1 <= IMAGE_SIDE and 0 <= y0 < y1 <= IMAGE_SIDE and 28 <= x1 - x0 <= 96


def test_a_scene_drawn_larger_keeps_its_boxes_on_its_shapes():
    small = speed.scene(np.random.default_rng(1))
    large = speed.scene(np.random.default_rng(1), 640)
    assert large[0].size == (640, 640) and large[2] == small[2]
    for box, scaled in zip(small[1], large[1]):
        assert scaled == [round(v * 640 / IMAGE_SIDE) for v in box]
    x0, y0, x1, y1 = large[1][0]
    centre = np.asarray(large[0])[(y0 + y1) // 2, (x0 + x1) // 2]
    assert tuple(centre) == tuple(np.asarray(small[0])[(small[1][0][1] + small[1][0][3]) // 2,
                                                      (small[1][0][0] + small[1][0][2]) // 2])


def test_shared_pairs_put_captions_with_one_wrong_word_on_one_image():
    pairs = speed.make_shared_pairs(6, captions_per_image=3, seed=2)
    assert len(pairs) == 6 and [p["id"] for p in pairs] == [str(i) for i in range(6)]
    for first in (pairs[0], pairs[3]):
        variants = pairs[int(first["id"]) + 1 : int(first["id"]) + 3]
        assert all(v["image"] is first["image"] and v["regions"] == first["regions"] for v in variants)
        assert all(v["caption"] != first["caption"] for v in variants)


def test_long_captions_reach_their_word_count_in_sentences_about_the_scene():
    for pair, short in zip(speed.make_long_pairs(4, 80), speed.make_pairs(4, seed=3)):
        assert len(pair["caption"].split()) >= 80 and pair["caption"].endswith(".")
        assert pair["regions"] == short["regions"]


def test_speed_offers_what_its_callers_import():
    names = ("CLIP_MODEL", "BENCH_METRICS", "make_pairs", "make_shared_pairs", "make_long_pairs", "model_files",
             "row_gaps", "write_pairs_file", "scene", "ray_speed", "pairs_per_second", "run", "summary")
    assert [n for n in names if not hasattr(speed, n)] == []
