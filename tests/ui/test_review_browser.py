"""The review stage in a real browser: an admin turns review on in the Review tab; an
annotator submits; a reviewer sends the judgement back with a comment; the annotator
sees the comment on the item handed back to them, corrects it and submits again; the
reviewer accepts (with the keyboard); the Review tab's history shows all four steps."""
import json

import pytest

from annotation_support import import_small_dataset
from capscope.annotation import workflow
from capscope.annotation.users import add_user, get_user
from capscope.annotation.votes import load_item
from capscope.db import Store
from capscope.server.api import create_app
from capscope.ui.page import mount_ui
from ui_support import Served, launched_chromium, logged_in_page, shot

ANN, REV, BOSS = ("ann", "ann-password-1"), ("rev", "rev-password-1"), ("boss", "boss-password-1")
COMMENT = "the word small is wrong too"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("review-ui")
    patch = pytest.MonkeyPatch()
    for name, value in {"CAPSCOPE_DATA_DIR": root / "data", "CAPSCOPE_CACHE": root / "cache",
                        "HF_HUB_OFFLINE": "1", "CAPSCOPE_NO_SEED": "1"}.items():
        patch.setenv(name, str(value))
    store = Store(f"sqlite:///{root / 'ui.db'}")
    import_small_dataset(store, root, n_images=2, n_captions=2, annotators_per_item=1)
    add_user(store, *ANN)
    add_user(store, *REV, role="reviewer")
    add_user(store, *BOSS, role="admin")
    app = mount_ui(create_app(store=store))
    with Served(app) as server:
        server.store = store
        yield server
    patch.undo()


@pytest.fixture(scope="module")
def chromium():
    yield from launched_chromium()


def wait_text(page, selector: str, text: str, shot_name: str = "review_failed.png"):
    """Wait until the element holds `text`; on a timeout, fail with what the page's status lines say."""
    from playwright.sync_api import TimeoutError as PageTimeout

    condition = f"document.querySelector({json.dumps(selector)})?.innerText.includes({json.dumps(text)})"
    try:
        page.wait_for_function(condition, timeout=30_000)
    except PageTimeout:
        shot(page, shot_name)
        said = {s: page.inner_text(s) for s in ("#cs-saved", "#cs-review-status", "#cs-review-header")
                if page.locator(s).count()}
        raise AssertionError(f"{selector} never held {text!r}; the page says {said}") from None


def open_tab(page, name: str, ready: str):
    page.get_by_role("tab", name=name).click()
    page.locator(ready).first.wait_for(timeout=30_000)


@pytest.mark.slow
@pytest.mark.browser
def test_submit_send_back_correct_accept_and_the_four_steps(chromium, served):
    # the admin turns review on for the dataset in the Review tab
    boss = logged_in_page(chromium, served, *BOSS)
    open_tab(boss, "Review", "#cs-review-header")
    boss.get_by_text("Review per dataset (admins)").click()
    boss.locator("#cs-review-switch-on input").check()
    boss.locator("#cs-review-switch-save").click()
    wait_text(boss, "#cs-review-settings", "default: review on")
    boss.close()

    # the annotator marks a word and submits with the keyboard
    ann = logged_in_page(chromium, served, *ANN)
    assert ann.get_by_role("tab", name="Review").count() == 0  # annotators do not review
    open_tab(ann, "Annotate", "#cs-annotate-tokens .token")
    item_id = workflow.next_item(served.store, get_user(served.store, "ann"))["item_id"]
    ann.locator("#cs-annotate-tokens .token").nth(2).click()  # "red"
    wait_text(ann, "#cs-saved", "1 wrong word")
    ann.locator("body").press("s")
    wait_text(ann, "#cs-saved", f"item {item_id} submitted")
    assert load_item(served.store, item_id).judgements == []  # pending: no vote yet

    # the reviewer sees ann's labels and sends the judgement back with a comment
    rev = logged_in_page(chromium, served, *REV)
    open_tab(rev, "Review", "#cs-review-header")
    wait_text(rev, "#cs-review-header", "Judgement by ann")
    wait_text(rev, "#cs-review-diff", "No changes")
    rev.locator("#cs-review-comment textarea").fill(COMMENT)
    rev.locator("#cs-review-return").click()
    wait_text(rev, "#cs-review-status", f"item {item_id} by ann: returned")

    # the annotator gets it back first, sees the comment, corrects and submits again
    ann.reload()
    ann.wait_for_selector("#cs-caption-a", timeout=30_000)
    open_tab(ann, "Annotate", "#cs-annotate-tokens .token")
    wait_text(ann, "#cs-annotate", "Sent back by rev")
    wait_text(ann, "#cs-annotate", COMMENT)
    wait_text(ann, "#cs-annotate", f"Item {item_id}")
    ann.locator("#cs-annotate-tokens .token").nth(1).click()  # "small"
    wait_text(ann, "#cs-saved", "2 wrong words")
    ann.locator("body").press("s")
    wait_text(ann, "#cs-saved", f"item {item_id} submitted")
    ann.close()

    # the reviewer takes it again (n), sees what changed and the earlier comment, and accepts (s)
    rev.locator("body").press("n")
    wait_text(rev, "#cs-review-header", "Sent back before by rev")
    rev.locator("body").press("s")
    wait_text(rev, "#cs-review-status", f"item {item_id} by ann: accepted")
    for step in ("submitted", "returned", "resubmitted", "accepted", COMMENT):
        wait_text(rev, "#cs-review-history", step)
    shot(rev, "review_four_steps.png")
    rows = rev.locator("#cs-review-history tr").all_inner_texts()
    steps = [row.split("\t")[1] for row in rows[1:] if row.split("\t")[1] != "edit"]
    assert steps == ["submitted", "returned", "resubmitted", "accepted"]
    rev.close()

    history = workflow.history(served.store, get_user(served.store, "ann"), item_id)
    assert [(h["action"], h["by"]) for h in history if h["action"] not in ("start", "edit")] == [
        ("submitted", "ann"), ("returned", "rev"), ("resubmitted", "ann"), ("accepted", "rev")]
    assert [j.incorrect_tokens for j in load_item(served.store, item_id).judgements] == [{1, 2}]
