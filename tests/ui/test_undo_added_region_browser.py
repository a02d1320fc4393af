"""Annotate in a real browser: "u" right after "a" (Add region) takes the region back. Before,
undo took back the label change before it and the stray region stayed for every annotator."""
import json

import numpy as np
import pytest

from capscope.annotation import workflow
from capscope.annotation.users import get_user
from capscope.demo import click_targets
from ui_support import click_at, launched_chromium, logged_in_page, served_scenes, shot, wait_for

ANN = ("ann", "ann-password-1")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    yield from served_scenes(tmp_path_factory.mktemp("undo-region-ui"), scenes=2, seed=5, dataset="left-out",
                             annotators_per_item=1, users=(ANN,), segmenter="classic")


@pytest.fixture(scope="module")
def chromium():
    yield from launched_chromium()


FAILED_SHOT = "annotate_undo_region_failed.png"


def saved_says(text: str) -> str:
    return f"document.querySelector('#cs-saved').innerText.includes({json.dumps(text)})"


def header_says(text: str) -> str:
    return f"document.querySelector('#cs-annotate').innerText.includes({json.dumps(text)})"


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
    x, y, _ = click_targets.next_click(target, np.zeros_like(target))
    click_at(page, item, x, y)
    wait_for(page, saved_says("1 click"), FAILED_SHOT)
    page.locator("body").press("a")
    wait_for(page, saved_says(f"region {n + 1} added"), FAILED_SHOT)
    wait_for(page, header_says(f"{n + 1} regions"), FAILED_SHOT)
    page.locator("body").press("u")
    wait_for(page, saved_says(f"region {n + 1} taken back"), FAILED_SHOT)
    wait_for(page, header_says(f"{n} regions"), FAILED_SHOT)
    shot(page, "annotate_region_taken_back.png")
    regions = workflow.get_item(served.store, ann, item["item_id"])["regions"]
    assert len(regions) == n + 1 and regions[n]["removed"]["how"] == "undone"
    page.close()
