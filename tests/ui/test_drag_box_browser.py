"""A box by drag, in a real browser (issue 69): on Annotate's picture, press, drag
and release draws a box (shown while dragging) that prompts the segmenter; a later
click refines the same region (box + click); "a" adds it with its box kept among
its prompts. A press that hardly moves stays a click. When the segmenter offers
several masks (SAM's three), "m" cycles the one shown, and "a" adds the one shown."""
import json
import time

import numpy as np
import pytest
from sqlalchemy import select

from capscope.annotation import workflow
from capscope.annotation.users import get_user
from capscope.db.models import Region
from capscope.metrics.click_segmenters import ClassicClickSegmenter
from capscope.metrics.regions import iou, rle_to_mask
from capscope.server.segmenting import ClickService
from capscope.demo import click_targets
from ui_support import ARTIFACTS, launched_chromium, logged_in_page, served_scenes, shot

ANN = ("ann", "ann-password-1")


class ThreeMasks(ClassicClickSegmenter):
    """The fallback's mask first, then two others, as SAM offers three for a lone prompt (SAM
    itself takes 10-20 s a picture on this CPU): the mask grown by 6 pixels, and its box filled."""

    def candidates(self, embedding, points, box=None):
        from scipy import ndimage

        mask, _ = self.predict(embedding, points, box)
        if not mask.any():
            return [(mask, None)]
        grown = ndimage.binary_dilation(mask, iterations=6)
        ys, xs = np.nonzero(mask)
        filled = np.zeros_like(mask)
        filled[ys.min():ys.max() + 1, xs.min():xs.max() + 1] = True
        return [(mask, 0.9), (grown, 0.6), (filled, 0.3)]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    yield from served_scenes(tmp_path_factory.mktemp("drag-ui"), scenes=2, seed=5, dataset="drag",
                             annotators_per_item=1, users=(ANN,), click_service=ClickService(segmenter=ThreeMasks()))


@pytest.fixture(scope="module")
def chromium():
    yield from launched_chromium()


def screen_point(page, selector: str, image_size, x: float, y: float) -> tuple[float, float]:
    """Where image pixel (x, y) is on screen, on a picture Gradio shows fitted (never enlarged) and centred."""
    image = page.locator(f"{selector} img")
    image.scroll_into_view_if_needed()  # a point below the window is no click at all
    page.wait_for_function("s => { const i = document.querySelector(s); return i && i.complete && i.naturalWidth > 0; }",
                           arg=f"{selector} img", timeout=30_000)  # a picture still loading has no size
    shown = image.bounding_box()
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    scale = natural[0] / image_size[0]
    fit = min(shown["width"] / natural[0], shown["height"] / natural[1], 1)
    left = shown["x"] + (shown["width"] - natural[0] * fit) / 2
    top = shown["y"] + (shown["height"] - natural[1] * fit) / 2
    return left + x * scale * fit, top + y * scale * fit


def drag(page, selector, image_size, start, end, steps=8, seen=None, picture: str | None = None):
    """Press at image pixel `start`, move to `end` in `steps`, release; `seen` gets the drawn box's
    on-screen size half way through, and `picture` names a screenshot of the picture then."""
    page.mouse.move(*screen_point(page, selector, image_size, *start))
    page.mouse.down()
    goal = screen_point(page, selector, image_size, *end)
    here = screen_point(page, selector, image_size, *start)
    for step in range(1, steps + 1):
        page.mouse.move(here[0] + (goal[0] - here[0]) * step / steps, here[1] + (goal[1] - here[1]) * step / steps)
        if seen is not None and step == steps // 2:
            seen.append(page.evaluate("() => { const b = document.getElementById('cs-drag-box');"
                                      " return b && [b.offsetWidth, b.offsetHeight]; }"))
        if picture and step == steps - 1:
            ARTIFACTS.mkdir(exist_ok=True)
            page.locator(selector).screenshot(path=str(ARTIFACTS / picture))
    page.mouse.up()


def wait_saved(page, text, timeout=30_000):
    from playwright.sync_api import TimeoutError as PageTimeout

    try:
        page.wait_for_function(f"document.querySelector('#cs-saved').innerText.includes({json.dumps(text)})",
                               timeout=timeout)
    except PageTimeout:
        shot(page, "drag_box_failed.png")
        raise AssertionError(f"{text!r} never showed; the page says: {page.inner_text('#cs-saved')}") from None


def bounds(mask: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


@pytest.mark.slow
@pytest.mark.browser
def test_a_dragged_box_segments_a_click_refines_it_and_a_adds_it_with_its_box(chromium, served):
    ann = get_user(served.store, ANN[0])
    item = workflow.next_item(served.store, ann)  # the page resumes this one
    target, _noun = served.targets[item["id"]][0]
    size = (item["width"], item["height"])
    n = len(item["regions"])
    x0, y0, x1, y1 = bounds(target)

    page = logged_in_page(chromium, served, *ANN)
    page.get_by_role("tab", name="Annotate").click()
    page.locator("#cs-annotate-tokens .token").first.wait_for(timeout=30_000)
    assert page.locator("#cs-click-mode").get_by_label("Mark mentioned").is_checked()  # a drag works whatever the click mode

    # a press that hardly moves (under a few screen pixels) is a click, not a box
    drag(page, "#cs-annotate-image", size, (2, 2), (2.4, 2.4), steps=2)
    wait_saved(page, "no region under that point")

    seen: list = []
    drag(page, "#cs-annotate-image", size, (x0 - 2, y0 - 2), (x1 + 2, y1 + 2), seen=seen,
         picture="annotate_dragging.png")
    released = time.perf_counter()
    wait_saved(page, "box · classic")
    latency_ms = (time.perf_counter() - released) * 1000
    assert seen and seen[0] and min(seen[0]) > 10  # the box was drawn while dragging
    assert page.locator("#cs-drag-box").count() == 0  # and is gone once released
    assert page.locator("#cs-click-mode").get_by_label("Segment +").is_checked()  # the next clicks refine it
    shot(page, "annotate_drag_box.png")

    # a click inside refines the same region: box and click together
    x, y, _ = click_targets.innermost(target)
    page.mouse.click(*screen_point(page, "#cs-annotate-image", size, x + 0.5, y + 0.5))
    wait_saved(page, "box + 1 click")
    page.locator("body").press("a")
    wait_saved(page, f"region {n + 1} added")
    with served.store.read() as session:
        region = session.scalars(select(Region).where(Region.image_id == item["image_id"])
                                 .order_by(Region.index.desc())).first()
        prompts, mask = region.prompts, region.mask_rle
    assert prompts["box"] is not None and len(prompts["points"]) == 1
    bx0, by0, bx1, by1 = prompts["box"]
    assert abs(bx0 - (x0 - 2)) <= 1.5 and abs(by1 - (y1 + 2)) <= 1.5  # the dragged corners, in image pixels
    assert iou(rle_to_mask(mask), target) >= 0.7
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "drag_box_latency.json").write_text(json.dumps({"release_to_mask_ms": round(latency_ms)}))
    page.close()


def shown_picture(page) -> bytes:
    return page.locator("#cs-annotate-image img").screenshot()


@pytest.mark.slow
@pytest.mark.browser
def test_m_cycles_the_segmenters_masks_and_a_adds_the_one_shown(chromium, served):
    ann = get_user(served.store, ANN[0])
    item = workflow.next_item(served.store, ann)
    while item is not None and item["id"] not in served.targets:
        item = workflow.next_item(served.store, ann)
    target, _noun = served.targets[item["id"]][0]
    size = (item["width"], item["height"])
    n = len(workflow.get_item(served.store, ann, item["item_id"])["regions"])
    x0, y0, x1, y1 = bounds(target)

    page = logged_in_page(chromium, served, *ANN)
    page.get_by_role("tab", name="Annotate").click()
    page.locator("#cs-annotate-tokens .token").first.wait_for(timeout=30_000)
    page.wait_for_function(f"document.querySelector('#cs-annotate').innerText.includes('Item {item['item_id']}')",
                           timeout=30_000)
    drag(page, "#cs-annotate-image", size, (x0 - 2, y0 - 2), (x1 + 2, y1 + 2))
    wait_saved(page, "mask 1 of 3 (0.90)")
    first = shown_picture(page)
    page.locator("body").press("m")
    wait_saved(page, "mask 2 of 3 (0.60)")
    second = shown_picture(page)
    assert second != first  # the shown mask changed
    page.locator("body").press("m")
    wait_saved(page, "mask 3 of 3 (0.30)")
    page.locator("body").press("m")
    wait_saved(page, "mask 1 of 3 (0.90)")  # round and round
    page.locator("body").press("m")
    wait_saved(page, "mask 2 of 3")
    shot(page, "annotate_next_mask.png")
    page.locator("body").press("a")
    wait_saved(page, f"region {n + 1} added")
    with served.store.read() as session:
        added = session.scalars(select(Region).where(Region.image_id == item["image_id"], Region.index == n)).one()
        mask = rle_to_mask(added.mask_rle)
    # the grown mask was added, not the best one
    assert mask.sum() > 1.3 * target.sum() and (mask & target).sum() >= 0.9 * target.sum()
    page.close()
