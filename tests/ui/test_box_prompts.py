"""Box prompts and Inspect's own regions, without a browser (issue 69): a dragged box
as anyone may send it (NaN, infinities, negative, huge, inverted, text, too long) is
refused or kept inside the image; Inspect segments an uploaded file through the click
service with the REST route's checks and per-user limit, and adds the mask to the
inspection's regions, at most MAX_INSPECT_REGIONS of them."""
import json

import numpy as np
import pytest
from PIL import Image

from capscope.annotation.refusals import AnnotationError
from capscope.metrics.regions import mask_to_rle, rle_to_mask
from capscope.pictures.draw import display_scale
from capscope.server import segmenting
from capscope.server.segmenting import ClickService
from capscope.ui.segment_drafts import dragged_box, prompt_note
from capscope.ui.inspect_segmenting import (MAX_INSPECT_REGIONS, regions_with, segment_draft_of, segment_on_inspected,
                                            empty_segment_draft)

SIZE = (128, 96)


def sent(box, **more) -> str:
    return json.dumps({"box": box, "drag": 1, **more})


@pytest.mark.parametrize("value", [
    None, "", "x", "[]", "{}", "null", '{"box": null}', sent([1, 2, 3]), sent([1, 2, 3, 4, 5]),
    sent(["1", 2, 30, 40]), sent([True, 2, 30, 40]), sent([[1], 2, 30, 40]),
    '{"box": [NaN, 2, 30, 40]}', '{"box": [1, Infinity, 30, 40]}', '{"box": [1, 2, -Infinity, 40]}',
    '{"box": [1e400, 2, 30, 40]}', sent([0, 0, 0.5, 90]), sent([900, 900, 2000, 2000]),
    sent([-50, -50, -1, -1]), "{" * 5000, '[' * 300 + ']' * 300, sent([1, 2, 30, 40]) + " " * 400,
])
def test_a_box_anyone_could_send_is_refused(value):
    with pytest.raises(AnnotationError):
        dragged_box(value, SIZE)


def test_a_box_is_kept_inside_the_picture_whichever_corner_the_drag_began_at():
    scale = display_scale(SIZE)
    assert dragged_box(sent([40 * scale, 30 * scale, 10 * scale, 5 * scale]), SIZE) == [10, 5, 40, 30]
    assert dragged_box(sent([-1e300, 20 * scale, 1e300, 2 * scale]), SIZE) == [0, 2, 128, 20]  # past the edges
    assert dragged_box(sent([10.26 * scale, 5 * scale, 40 * scale, 30 * scale]), SIZE)[0] == pytest.approx(10.3)


def test_the_note_says_what_prompted_the_region():
    assert prompt_note({"box": [1, 2, 3, 4], "points": []}) == "box"
    assert prompt_note({"box": [1, 2, 3, 4], "points": [[1, 1, 1], [2, 2, 0]]}) == "box + 2 clicks"
    assert prompt_note({"box": None, "points": [[1, 1, 1]]}) == "1 click"


@pytest.fixture
def picture(tmp_path):
    pixels = np.full((SIZE[1], SIZE[0], 3), 230, np.uint8)
    pixels[20:60, 30:80] = (220, 30, 30)
    path = tmp_path / "scene.png"
    Image.fromarray(pixels).save(path)
    target = np.zeros((SIZE[1], SIZE[0]), bool)
    target[20:60, 30:80] = True
    return str(path), target


def iou(a, b) -> float:
    return float((a & b).sum() / max(1, (a | b).sum()))


def test_inspect_segments_the_file_by_box_then_click_and_keeps_the_old_draft_when_refused(picture):
    path, target = picture
    clicks = ClickService("classic")
    try:
        scale = display_scale(SIZE)
        draft, note = segment_on_inspected(clicks, path, None, "ann", drag=sent([27 * scale, 17 * scale,
                                                                                  83 * scale, 63 * scale]))
        assert note.startswith("box · ") and draft["box"] == [27, 17, 83, 63] and draft["image"] == path
        assert iou(rle_to_mask(draft["mask"]), target) > 0.8
        draft, note = segment_on_inspected(clicks, path, draft, "ann", point=[55 * scale, 40 * scale])
        assert note.startswith("box + 1 click") and draft["points"] == [[55, 40, 1]]
        for bad in ([float("nan"), 3], [1, 2, 3], "55,40", None):  # a click's position as anyone may send it
            kept, note = segment_on_inspected(clicks, path, draft, "ann", point=bad)
            assert kept == draft and ("no position" in note or note.startswith("⚠"))
        kept, note = segment_on_inspected(clicks, path, draft, "ann", drag='{"box": [NaN, 1, 2, 3]}')
        assert kept == draft and note.startswith("⚠")
        # a draft of another picture is not this one's
        assert segment_draft_of(draft, path + ".other") == empty_segment_draft(path + ".other")
        # the user's limit on segment calls running at once holds in Inspect too
        for _ in range(segmenting.PER_USER):
            clicks.in_flight.enter("ann")
        kept, note = segment_on_inspected(clicks, path, draft, "ann", point=[10, 10])
        assert kept == draft and "segment calls running" in note
    finally:
        clicks.close()


def test_no_picture_no_segmenting(picture):
    clicks = ClickService("classic")
    try:
        draft, note = segment_on_inspected(clicks, None, None, "ann", point=[1, 1])
        assert draft["mask"] is None and "picture" in note
    finally:
        clicks.close()


def test_an_added_region_joins_the_scored_ones_up_to_the_limit(picture):
    _, target = picture
    mask = mask_to_rle(target)
    row = {"regions": [{"box": [0, 0, 10, 10]}, {"box": [5, 5, 20, 20], "mask": mask}]}
    given = regions_with(row, None, mask)
    assert given[:2] == row["regions"] and given[2] == {"box": [30, 20, 80, 60], "mask": mask}
    assert regions_with(None, [{"box": [1, 1, 2, 2]}], mask)[0] == {"box": [1, 1, 2, 2]}  # before any scoring
    with pytest.raises(AnnotationError):
        regions_with({"regions": [{"box": [0, 0, 1, 1]}] * MAX_INSPECT_REGIONS}, None, mask)


def test_inspect_shows_the_ties_annotators_made_on_a_demo_scene(tmp_path):
    from capscope.annotation import workflow
    from capscope.annotation.importer import ImportOptions, import_captokeneval
    from capscope.annotation.queue import DEMO_DATASET
    from capscope.annotation.users import add_user, get_user
    from capscope.db import Store
    from capscope.demo import click_targets
    from capscope.ui.inspect import inspect_ties

    path, _targets = click_targets.write_scenes(tmp_path, n=1, seed=3)
    store = Store(f"sqlite:///{tmp_path / 'ties.db'}")
    import_captokeneval(store, path, ImportOptions(dataset=DEMO_DATASET, annotators_per_item=1, progress=False))
    add_user(store, "ann", "ann-password-1")
    ann = get_user(store, "ann")
    item = workflow.next_item(store, ann)
    example = {"id": item["id"], "caption": item["caption"], "regions": item["regions"]}
    assert inspect_ties(store, example) == ""  # nobody has tied a word yet
    word = next(i for i, t in enumerate(item["tokens"]) if t["semantic"])
    workflow.toggle_link(store, ann, item["item_id"], word, 1)
    assert inspect_ties(store, example) == ""  # a draft is no vote
    workflow.submit(store, ann, item["item_id"])
    shown = inspect_ties(store, example)
    assert f"“{item['tokens'][word]['text']}” → region 2 (1 of 1)" in shown
    assert inspect_ties(store, {**example, "caption": "another caption"}) == ""  # not that item
    assert inspect_ties(None, example) == "" and inspect_ties(store, None) == ""


def test_inspect_goes_round_the_segmenters_masks(picture):
    from capscope.metrics.click_segmenters import ClassicClickSegmenter
    from capscope.ui.inspect_segmenting import next_inspected_mask

    class TwoMasks(ClassicClickSegmenter):
        def candidates(self, embedding, points, box=None):
            mask, _ = self.predict(embedding, points, box)
            return [(mask, 0.8), (np.ones_like(mask), 0.4)]

    path, target = picture
    clicks = ClickService(segmenter=TwoMasks())
    try:
        scale = display_scale(SIZE)
        draft, note = segment_on_inspected(clicks, path, None, "ann", point=[55 * scale, 40 * scale])
        assert "mask 1 of 2 (0.80)" in note and "Next mask" in note and "<kbd>" not in note
        best = draft["mask"]
        draft, note = next_inspected_mask(draft, path)
        assert "mask 2 of 2 (0.40)" in note and rle_to_mask(draft["mask"]).all()
        draft, note = next_inspected_mask(draft, path)
        assert draft["shown"] == 0 and draft["mask"] == best
        assert "One mask only" in next_inspected_mask(None, path)[1]
    finally:
        clicks.close()
