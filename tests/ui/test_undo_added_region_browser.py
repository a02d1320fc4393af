"""Annotate in a real browser: "u" right after "a" (Add region) takes the region back. Before,
undo took back the label change before it and the stray region stayed for every annotator."""
import json

import numpy as np
import pytest

from capscope.annotation import workflow
from capscope.annotation.importer import ImportOptions, import_captokeneval
from capscope.annotation.users import add_user, get_user
from capscope.db import Store
from capscope.server.api import create_app
from capscope.studies import click_noc
from capscope.ui.page import mount_ui
from ui_support import Served, launched_chromium, logged_in_page, shot

ANN = ("ann", "ann-password-1")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("undo-region-ui")
    patch = pytest.MonkeyPatch()
    for name, value in {"CAPSCOPE_DATA_DIR": root / "data", "CAPSCOPE_CACHE": root / "cache",
                        "HF_HUB_OFFLINE": "1", "CAPSCOPE_NO_SEED": "1"}.items():
        patch.setenv(name, str(value))
    path, targets = click_noc.write_scenes(root, n=2, seed=5)
    store = Store(f"sqlite:///{root / 'ui.db'}")
    import_captokeneval(store, path, ImportOptions(dataset="left-out", annotators_per_item=1, progress=False))
    add_user(store, *ANN)
    app = mount_ui(create_app(store=store, segmenter="classic"))
    with Served(app) as server:
        server.store, server.targets = store, targets
        yield server
    patch.undo()


@pytest.fixture(scope="module")
def chromium():
    yield from launched_chromium()


def click_at(page, item, x, y):
    """Click image pixel (x, y) on Annotate's displayed (enlarged, fitted) picture."""
    image = page.locator("#cs-annotate-image img")
    shown = image.bounding_box()
    natural = image.evaluate("img => [img.naturalWidth, img.naturalHeight]")
    scale = natural[0] / item["width"]
    fit = min(shown["width"] / natural[0], shown["height"] / natural[1])
    left = shown["x"] + (shown["width"] - natural[0] * fit) / 2
    top = shown["y"] + (shown["height"] - natural[1] * fit) / 2
    page.mouse.click(left + x * scale * fit, top + y * scale * fit)


def wait_for(page, condition: str):
    from playwright.sync_api import TimeoutError as PageTimeout

    try:
        page.wait_for_function(condition, timeout=30_000)
    except PageTimeout:
        shot(page, "annotate_undo_region_failed.png")
        raise AssertionError(f"{condition} did not hold; the page says: {page.inner_text('#cs-saved')}") from None


def saved_says(text: str) -> str:
    return f"document.querySelector('#cs-saved').innerText.includes({json.dumps(text)})"


@pytest.mark.slow
@pytest.mark.browser
def test_u_right_after_adding_a_region_takes_it_back_for_everyone(chromium, served):
    ann = get_user(served.store, ANN[0])
    item = workflow.next_item(served.store, ann)  # the page resumes this draft
    target, _ = served.targets[item["id"]][0]
    n = len(item["regions"])
    page = logged_in_page(chromium, served, *ANN)
    page.get_by_role("tab", name="Annotate").click()
    page.locator("#cs-annotate-tokens .token").first.wait_for(timeout=30_000)
    page.locator("#cs-annotate").get_by_label("Segment +").check()
    x, y, _ = click_noc.next_click(target, np.zeros_like(target))
    click_at(page, item, x, y)
    wait_for(page, saved_says("1 click"))
    page.locator("body").press("a")
    wait_for(page, saved_says(f"region {n + 1} added"))
    wait_for(page, f"document.querySelector('#cs-annotate').innerText.includes('{n + 1} regions')")
    page.locator("body").press("u")
    wait_for(page, saved_says(f"region {n + 1} taken back"))
    wait_for(page, f"document.querySelector('#cs-annotate').innerText.includes('{n} regions')")
    shot(page, "annotate_region_taken_back.png")
    regions = workflow.get_item(served.store, ann, item["item_id"])["regions"]
    assert len(regions) == n + 1 and regions[n]["removed"]["how"] == "undone"
    page.close()
