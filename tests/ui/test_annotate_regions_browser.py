"""Annotate in a real browser: an annotator makes a region the proposer missed by
clicking (a first click, a second one to correct it, "a" to add it), marks it
mentioned, ties its word to it; a second annotator then sees the region, and the
CapTokenEval export holds it with its source, who added it, and the tie."""
import json

import numpy as np
import pytest
from PIL import Image

from capscope.annotation import export, workflow
from capscope.annotation.users import get_user
from capscope.demo import click_targets
from capscope.metrics.click_segmenters import ClassicClickSegmenter
from capscope.metrics.regions import iou, rle_to_mask
from ui_support import click_at, launched_chromium, logged_in_page, served_scenes, shot, wait_for

ANN, BOB = ("ann", "ann-password-1"), ("bob", "bob-password-1")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    yield from served_scenes(tmp_path_factory.mktemp("regions-ui"), scenes=3, seed=11, dataset="left-out",
                             annotators_per_item=2, users=(ANN, BOB), segmenter="classic")


@pytest.fixture(scope="module")
def chromium():
    yield from launched_chromium()


def wait_saved(page, text):
    wait_for(page, f"document.querySelector('#cs-saved').innerText.includes({json.dumps(text)})",
             "annotate_added_region_failed.png")


@pytest.mark.slow
@pytest.mark.browser
def test_click_segment_add_mention_and_tie_then_a_second_annotator_sees_it(chromium, served):
    ann = get_user(served.store, ANN[0])
    item = workflow.next_item(served.store, ann)  # the page resumes this draft
    target, noun = served.targets[item["id"]][0]
    n = len(item["regions"])
    assert n < 9  # its number key toggles it below

    page = logged_in_page(chromium, served, *ANN)
    page.get_by_role("tab", name="Annotate").click()
    page.locator("#cs-annotate-tokens .token").first.wait_for(timeout=30_000)
    page.get_by_label("Segment +").check()
    # the first click at the shape's innermost pixel; the second where the NoC protocol puts it
    first = click_targets.next_click(target, np.zeros_like(target))
    click_at(page, item, first[0], first[1])
    wait_saved(page, "1 click")
    assert "fallback" in page.inner_text("#cs-saved")
    segmenter = ClassicClickSegmenter()
    mask, _ = segmenter.predict(segmenter.embed(Image.open(served.root / f"images/{item['id']}.png")), [first])
    second = click_targets.next_click(target, mask)
    page.get_by_label("Segment +" if second[2] else "Segment −").check()
    click_at(page, item, second[0], second[1])
    wait_saved(page, "2 clicks")
    page.locator("body").press("a")
    wait_saved(page, f"region {n + 1} added")

    page.get_by_label("Mark mentioned").check()
    page.locator("body").press(str(n + 1))
    wait_saved(page, "1 region mentioned")
    page.get_by_label("Tie word → regions").check()
    page.locator("#cs-annotate-tokens .token").nth(noun).click()
    wait_saved(page, "picked")
    x, y, _ = click_targets.innermost(target)
    click_at(page, item, x, y)
    wait_for(page, f"document.querySelector('#cs-ties').innerText.includes('→ {n + 1}')",
             "annotate_added_region_failed.png")
    shot(page, "annotate_added_region.png")
    labels = workflow.get_item(served.store, ann, item["item_id"])["labels"]
    assert labels["mentioned_regions"] == [n] and labels["links"] == [[noun, n]]
    page.locator("body").press("s")
    wait_saved(page, f"item {item['item_id']} submitted")
    page.close()

    bob = logged_in_page(chromium, served, *BOB)
    bob.get_by_role("tab", name="Annotate").click()
    bob.wait_for_function(f"document.querySelector('#cs-annotate').innerText.includes('{n + 1} regions')",
                          timeout=30_000)
    seen = workflow.next_item(served.store, get_user(served.store, BOB[0]))
    assert seen["item_id"] == item["item_id"] and seen["regions"][n]["added_by"] == "ann"
    bob.close()

    row = next(json.loads(line) for line in export.iter_export(served.store, "captokeneval")
               if json.loads(line)["id"] == item["id"])
    region = row["regions"][n]
    assert region["source"] == "annotator" and region["added_by"] == "ann" and region["label"] == "mentioned"
    assert row["links"] == [{"token": noun, "region": n, "votes": 1, "total": 1}]
    # clicks on the shown picture land within a display pixel of the protocol's points, so the
    # mask is the shape's but not to the NoC study's IoU (measured through REST in tests/server)
    assert iou(rle_to_mask(region["mask"]), target) >= 0.7
