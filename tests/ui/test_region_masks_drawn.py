"""A region with a mask is drawn by its mask (issue 71): its outline follows the
saved shape, in the region's colour, and the corners of its box that lie outside
the shape stay the picture's own; a region without one keeps its box."""
import numpy as np
from PIL import Image

from capscope.metrics.regions import mask_to_box, mask_to_rle
from capscope.pictures import draw
from capscope.ui import annotate_drawing, inspect_scoring, inspect_views

GREY = (200, 200, 200)
W, H = 100, 80


def disc(cx=40, cy=35, r=18) -> np.ndarray:
    yy, xx = np.mgrid[:H, :W]
    return (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r


def picture() -> Image.Image:
    return Image.new("RGB", (W, H), GREY)


def near(pixel, colour, tolerance=30) -> bool:
    return sum(abs(int(a) - int(b)) for a, b in zip(pixel, colour)) <= tolerance


def contour_points(mask: np.ndarray, scale: int, out: int):
    """Display pixels `out` px outside the mask's edge, left, right, top and bottom of it."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    cy, cx = (rows[0] + rows[-1] + 1) * scale // 2, (cols[0] + cols[-1] + 1) * scale // 2
    return [(cols[0] * scale - out, cy), ((cols[-1] + 1) * scale + out - 1, cy),
            (cx, rows[0] * scale - out), (cx, (rows[-1] + 1) * scale + out - 1)]


def box_corners(box, scale: int):
    """Display pixels at the three corners of a box that the number label leaves free, just inside it."""
    x0, y0, x1, y1 = (int(v * scale) for v in box)
    return [(x1 - 2, y0 + 2), (x0 + 2, y1 - 2), (x1 - 2, y1 - 2)]


def test_score_overlay_outlines_the_mask_not_the_box():
    mask = disc()
    box = list(mask_to_box(mask))
    scale = draw.display_scale((W, H))
    colour = draw.heat(0.5)
    drawn = np.asarray(draw.score_overlay(picture(), [box], [0.7], [True], masks=[mask_to_rle(mask)]))
    for x, y in contour_points(mask, scale, 2):
        assert near(drawn[y, x], colour), (x, y, drawn[y, x])
    for x, y in box_corners(box, scale):
        assert near(drawn[y, x], GREY), (x, y, drawn[y, x])
    # the same region without its mask is its box, as before
    boxed = np.asarray(draw.score_overlay(picture(), [box], [0.7], [True]))
    x0, y0, x1, y1 = draw.outside(box, scale, 2 + scale, (W * scale, H * scale))
    assert near(boxed[int(y1) - 1, int(x1) - 1], colour)


def test_an_unmentioned_masked_region_is_dashed_magenta_on_its_outline():
    mask = disc()
    scale = draw.display_scale((W, H))
    drawn = np.asarray(draw.score_overlay(picture(), [list(mask_to_box(mask))], [0.2], [False],
                                          masks=[mask_to_rle(mask)]))
    ring, top, left = draw.mask_outline(mask, scale, 2 + scale)
    painted = drawn[top:top + ring.shape[0], left:left + ring.shape[1]][ring]
    magenta = np.array([near(p, draw.UNMENTIONED) for p in painted])
    assert 0.3 < magenta.mean() < 0.7  # dashed: about half of the outline


def test_annotate_draws_a_saved_mask_as_its_outline_and_tint(tmp_path):
    mask = disc(60, 40, 15)
    path = tmp_path / "scene.png"
    picture().save(path)
    box = list(mask_to_box(mask))
    item = {"item_id": "1", "id": "disc-1", "dataset": "d", "caption": "a disc", "width": W, "height": H, "_path": str(path), "tokens": [],
            "regions": [{"index": 0, "box": box, "mask": mask_to_rle(mask), "source": "added", "added_by": "ann"}],
            "labels": {"mentioned_regions": [0]}}
    drawn = np.asarray(annotate_drawing._picture(item, None)[1])
    scale = draw.display_scale((W, H))
    for x, y in contour_points(mask, scale, 2):
        assert near(drawn[y, x], draw.CHOSEN), (x, y, drawn[y, x])
    for x, y in box_corners(box, scale):
        assert near(drawn[y, x], GREY), (x, y, drawn[y, x])


def test_inspect_outlines_given_regions_by_their_masks():
    mask = disc()
    box = list(mask_to_box(mask))
    row = {"caption": "a disc", "tokens": [], "regions": [{"box": box, "confidence": None, "source": "given"}],
           "metrics": {"infometic": {"region_scores": [0.4], "region_mentioned": [True]}}, "error": None}
    row = inspect_scoring.with_given_masks(row, [{"box": box, "mask": mask_to_rle(mask)}])
    drawn = np.asarray(inspect_views.overlay(picture(), row, "infometic"))
    scale = draw.display_scale((W, H))
    for x, y in contour_points(mask, scale, 2):
        assert near(drawn[y, x], draw.heat(0.5)), (x, y, drawn[y, x])
    for x, y in box_corners(box, scale):
        assert near(drawn[y, x], GREY)
    # boxes alone (proposals, or given boxes without masks) stay boxes
    assert inspect_scoring.with_given_masks(row, [{"box": box}]) is row or "mask" not in \
        inspect_scoring.with_given_masks({**row, "regions": [{"box": box}]}, [{"box": box}])["regions"][0]


def test_a_mask_of_another_size_or_malformed_falls_back_to_the_box():
    assert draw.decoded_mask({"size": [10, 10], "counts": "bad"}, (W, H)) is None
    assert draw.decoded_mask(mask_to_rle(np.ones((10, 10), bool)), (W, H)) is None
    assert draw.decoded_mask(None, (W, H)) is None


def test_the_demo_scenes_inspect_offers_carry_their_masks(tmp_path):
    """Inspect's demo scenes hand their regions' masks on (they were boxes only), so the
    picture outlines each shape and HICE-S scores the mask."""
    import json

    from capscope.demo.dataset import write_demo_data
    from capscope.ui.page import demo_examples

    write_demo_data(tmp_path, n=2, seed=0, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "captokeneval.jsonl").read_text().splitlines()]
    examples = demo_examples(tmp_path)
    masked = [r for r in examples[0]["regions"] if "mask" in r]
    source = next(row for row in rows if row["id"] == examples[0]["id"])
    assert len(masked) == sum(1 for r in source["regions"] if r.get("mask")) > 0
