"""Inspect segments the picture being inspected, in a real browser (issue 69, item 3):
a box dragged on a caption's overlay and a click inside it make a mask through the
server's click service (in process, no item), "Next mask" shows the segmenter's next
one; "Add region" makes it one more region
of this inspection, and both captions are scored again at once: the region-level
verdicts count it. Nothing
is stored."""
import numpy as np
import pytest
from PIL import Image
from sqlalchemy import func, select

from capscope.annotation.users import add_user
from capscope.db.models import Region
from capscope.server.api import create_app
from capscope.ui.page import mount_ui
from capscope.server.segmenting import ClickService
from test_drag_box_browser import ThreeMasks, drag, screen_point
from ui_support import Served, launched_chromium, logged_in_page, shot, use_demo_checkpoint

USER = ("inspector", "inspector-password-1")
SQUARE = (30, 20, 80, 60)  # x0, y0, x1, y1 of the red square on the picture


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect-segment")
    patch = pytest.MonkeyPatch()
    for name, value in {"CAPSCOPE_DATA_DIR": root / "data", "HF_HUB_OFFLINE": "1", "CAPSCOPE_NO_SEED": "1"}.items():
        patch.setenv(name, str(value))
    use_demo_checkpoint(patch, root)
    app = create_app(f"sqlite:///{root / 'ui.db'}", click_service=ClickService(segmenter=ThreeMasks()))
    add_user(app.state.store, *USER)
    app.state.models.scorer  # loaded before the first page asks
    picture = root / "scene.png"
    pixels = np.full((96, 128, 3), 230, np.uint8)
    x0, y0, x1, y1 = SQUARE
    pixels[y0:y1, x0:x1] = (220, 30, 30)
    Image.fromarray(pixels).save(picture)
    with Served(mount_ui(app)) as server:
        server.root, server.picture, server.store = root, picture, app.state.store
        yield server
    patch.undo()


@pytest.fixture(scope="module")
def chromium():
    yield from launched_chromium()


def wait_text(page, selector: str, text: str, timeout=30_000):
    from playwright.sync_api import TimeoutError as PageTimeout

    try:
        page.wait_for_function("([s, t]) => (document.querySelector(s)?.innerText || '').includes(t)",
                               arg=[selector, text], timeout=timeout)
    except PageTimeout:
        shot(page, "inspect_segment_failed.png")
        raise AssertionError(f"{text!r} never showed in {selector}: {page.inner_text(selector)!r}; the note says "
                             f"{page.inner_text('#cs-inspect-segment')!r}") from None


def regions_scored(page) -> int:
    """N of the summary's "Regions left out: ... of N" under caption A."""
    text = page.inner_text("body").split("Regions left out:")[1]
    return int(text.split(" of ")[1].split()[0])


@pytest.mark.slow
@pytest.mark.browser
def test_drag_and_click_segment_the_inspected_picture_and_the_added_region_is_scored(chromium, served):
    page = logged_in_page(chromium, served, *USER)
    page.set_input_files("#cs-image input[type=file]", str(served.picture))
    page.wait_for_selector("#cs-image img", timeout=30_000)
    page.fill("#cs-caption-a textarea", "a red square")
    page.click("#cs-score")
    wait_text(page, "body", "Regions left out:")
    before = regions_scored(page)
    size = (128, 96)

    x0, y0, x1, y1 = SQUARE
    seen: list = []
    drag(page, "#cs-overlay-a", size, (x0 - 3, y0 - 3), (x1 + 3, y1 + 3), seen=seen)
    wait_text(page, "#cs-inspect-segment", "box · classic")
    assert seen and seen[0] and min(seen[0]) > 10  # drawn while dragging
    assert page.locator("#cs-inspect-mode").get_by_label("Segment: add (+)").is_checked()
    page.mouse.click(*screen_point(page, "#cs-overlay-a", size, 55, 40))
    wait_text(page, "#cs-inspect-segment", "box + 1 click")
    wait_text(page, "#cs-inspect-segment", "mask 1 of 3")
    before_next = page.locator("#cs-overlay-a img").screenshot()
    source = page.get_attribute("#cs-overlay-a img", "src")
    page.click("#cs-inspect-next-mask")
    wait_text(page, "#cs-inspect-segment", "mask 2 of 3")
    page.wait_for_function("s => { const i = document.querySelector('#cs-overlay-a img');"
                           " return i.src !== s && i.complete && i.naturalWidth > 0; }", arg=source, timeout=30_000)
    assert page.locator("#cs-overlay-a img").screenshot() != before_next  # the other mask is shown
    shot(page, "inspect_segment_draft.png")

    page.click("#cs-inspect-add")
    wait_text(page, "#cs-inspect-segment", "added and scored", timeout=60_000)
    assert regions_scored(page) == before + 1
    # the overlay draws it numbered among the regions, with the mode back to See what matches a click reports one
    page.locator("#cs-inspect-mode").get_by_label("See what matches").check()
    page.mouse.click(*screen_point(page, "#cs-overlay-a", size, 55, 40))
    wait_text(page, "#cs-match-a", "score")
    shot(page, "inspect_segment_added.png")
    with served.store.read() as session:  # an inspection's regions are not stored
        assert session.scalar(select(func.count()).select_from(Region)) == 0
    page.close()
