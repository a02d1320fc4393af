"""Closing the loop in a real browser: an annotator labels an item in the
Annotate tab, an admin fine-tunes a model version on the dataset's labels in
the Admin tab's Models panel, watches the job end and the version appear with
its held-out figures, its parent and its figures on a second dataset chosen
as the check set, activates it; the item on the annotator's
screen, looked at again, and their next item show suggestions that name the
new version (the tag its stored predictions carry); back on the default
model, the suggestions say so again.

The served app is `capscope serve`'s (REST API and UI on one port) over a
SQLite store holding four demo-world scenes with gold labels, except the
first item's, which the annotator labels; the model is the bundled demo
model (InfoMetIC only), fine-tuned for a few steps. Headless Chromium through
Playwright (marked `browser`, skipped when /usr/bin/chromium is missing).
Screenshots go to tests/artifacts/."""
import json
import re

import pytest
from sqlalchemy import select

from capscope.annotation import workflow
from capscope.annotation.users import add_user, get_user
from capscope.db import Prediction, Store
from ui_support import Served, launched_chromium, logged_in_page, shot

ADMIN, ANN = ("boss", "boss-password-1"), ("ann", "ann-password-1")
DATASET = "world"
CHECK = "home"   # another labelled dataset, scored before and after as the check set
STEPS = 5

pytestmark = pytest.mark.browser


def factory(metrics, infometic_checkpoint=None):
    """The server's own default factory, InfoMetIC only (the other metrics' weights are not here)."""
    from capscope.server.scoring import default_factory

    return default_factory(["infometic"], infometic_checkpoint=infometic_checkpoint)


def without_labels(row: dict) -> dict:
    """A CapTokenEval row with no gold: its words and regions unlabelled."""
    return {**row, "tokens": [{**t, "label": None} for t in row["tokens"]],
            "regions": [{**r, "label": None} for r in row["regions"]]}


@pytest.fixture
def served(tmp_path, monkeypatch):
    from capscope.annotation.importer import ImportOptions, import_captokeneval
    from capscope.demo.dataset import write_demo_data
    from capscope.server.api import create_app
    from capscope.ui.page import mount_ui

    for name, value in {"CAPSCOPE_DATA_DIR": tmp_path / "data", "CAPSCOPE_CACHE": tmp_path / "cache",
                        "HF_HUB_OFFLINE": "1", "CAPSCOPE_NO_SEED": "1"}.items():
        monkeypatch.setenv(name, str(value))
    for name in ("CAPSCOPE_INFOMETIC_CHECKPOINT", "CAPSCOPE_DEMO_MODEL", "CAPSCOPE_NO_DEMO"):
        monkeypatch.delenv(name, raising=False)  # no released checkpoint: the bundled demo model is the default
    write_demo_data(tmp_path / "demo", 4, seed=3, progress=False)
    jsonl = tmp_path / "demo" / "captokeneval.jsonl"
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    rows[0] = without_labels(rows[0])  # the item the annotator labels in the browser
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    store = Store(f"sqlite:///{tmp_path / 'loop.db'}")
    import_captokeneval(store, jsonl, ImportOptions(dataset=DATASET, annotators_per_item=1, regions="none",
                                                    progress=False))
    write_demo_data(tmp_path / "home", 2, seed=5, progress=False)
    import_captokeneval(store, tmp_path / "home" / "captokeneval.jsonl",
                        ImportOptions(dataset=CHECK, annotators_per_item=1, regions="none", progress=False))
    add_user(store, *ADMIN, role="admin")
    add_user(store, *ANN)
    app = create_app(store=store, scorer_factory=factory, models_dir=tmp_path / "models")
    models = app.state.models
    app = mount_ui(app, seed=False)
    models.scorer  # load the default model before the first page asks for it
    with Served(app) as server:
        server.store, server.first_id = store, rows[0]["id"]
        yield server


@pytest.fixture
def chromium():
    yield from launched_chromium()


def wait_text(page, selector: str, text: str, timeout: float = 30_000) -> str:
    """Wait until the element's visible text contains `text`; returns that text."""
    page.wait_for_function("([s, t]) => (document.querySelector(s)?.innerText || '').includes(t)",
                           arg=[selector, text], timeout=timeout)
    return page.inner_text(selector)


def choose(page, dropdown: str, option: str) -> None:
    """Pick an option of a gr.Dropdown (by its elem_id) as a user does: open it, click the option."""
    field = page.locator(f"{dropdown} input").first
    field.click()
    # two dropdowns' option lists can be in the page at once: take the one this field controls
    page.locator(f"#{field.get_attribute('aria-controls')}").get_by_role("option", name=option, exact=True).click()


def table_row(page, selector: str, row: int) -> list[str]:
    """A gr.Dataframe's row as shown (Gradio 6 draws a grid of cells; its <table> is hidden)."""
    return page.eval_on_selector_all(f"{selector} [data-testid^=cell-{row}-]",
                                     "cells => cells.map(c => c.innerText.trim())")


@pytest.mark.slow
def test_browser_label_train_activate_and_see_the_new_versions_suggestions(chromium, served):
    from capscope.annotation.model_versions import DEFAULT_TAG, list_versions
    from capscope.common.checksums import file_sha256
    from capscope.metrics.loading import demo_model_path

    store, ann = served.store, get_user(served.store, ANN[0])

    # 1. the annotator marks a wrong word on the one unlabelled item and submits it
    annotator = logged_in_page(chromium, served, *ANN)
    annotator.get_by_role("tab", name="Annotate").click()
    tokens = annotator.locator("#cs-annotate-tokens .token")
    tokens.first.wait_for(timeout=30_000)
    wait_text(annotator, "#cs-annotate", served.first_id)
    item = workflow.next_item(store, ann)
    assert item["id"] == served.first_id and item["labels"]["revision"] == 0
    word = next(i for i, t in enumerate(item["tokens"]) if t["semantic"])
    tokens.nth(word).click()
    wait_text(annotator, "#cs-saved", "revision 1")
    assert "1 wrong word" in annotator.inner_text("#cs-saved")
    annotator.get_by_label("Show model suggestions (p)").check()  # before any version: the default model's
    wait_text(annotator, "#cs-suggested", "the server's default model")
    annotator.click("#cs-submit")
    wait_text(annotator, "#cs-saved", f"item {item['item_id']} submitted")
    labels = workflow.get_item(store, ann, item["item_id"])["labels"]
    assert labels["status"] == "submitted" and labels["incorrect_tokens"] == [word]
    second = workflow.next_item(store, ann)  # the annotator's draft now, on screen
    wait_text(annotator, "#cs-annotate", f"Item {second['item_id']}")
    wait_text(annotator, "#cs-suggested", "the server's default model")

    # 2. the admin trains a version on the dataset's labels in the Models panel
    admin = logged_in_page(chromium, served, *ADMIN)
    admin.get_by_role("tab", name="Admin").click()
    wait_text(admin, "#cs-models-progress", "No training job yet.")
    choose(admin, "#cs-models-dataset", DATASET)
    admin.locator("#cs-models-steps input").fill(str(STEPS))
    choose(admin, "#cs-models-check", CHECK)
    admin.get_by_label("Augment").check()
    admin.click("#cs-models-train")
    wait_text(admin, "#cs-models-progress", f"Job 1 on {DATASET}: running")
    progress = wait_text(admin, "#cs-models-progress", ": done", timeout=120_000)
    assert f"Job 1 on {DATASET}: done: version 1 added (not active yet)" in progress, progress
    (version,) = list_versions(store)
    tag = f"v1:{version['sha256'][:12]}"
    assert version["labels"]["dataset"] == DATASET and version["figures"]["training"]["augment"]
    # every item was learnt from: the annotator's judgement stands in for the missing gold
    assert version["labels"]["train"]["items"] + version["labels"]["held_out"]["items"] == 8, version["labels"]
    wait_text(admin, "#cs-models-versions", "v1")
    row = table_row(admin, "#cs-models-versions", 0)
    demo_sha = file_sha256(demo_model_path())[:12]
    f1, auroc = ({side: f"{version['figures'][side][key]:.3f}" for side in ("before", "after")}
                 for key in ("incorrect_token_f1", "incorrect_token_auroc"))
    check = version["figures"]["check"]
    assert check["dataset"] == CHECK and check["before"]["n_items"] == 4, check
    check_f1 = {side: f"{check[side]['incorrect_token_f1']:.3f}" for side in ("before", "after")}
    # id, name, parent (the demo model, by sha256), dataset, held-out F1 and AUROC before → after,
    # the check dataset and its F1 before → after, the fitted word threshold scale, not active
    scale = f"× {version['figures']['word_threshold']['scale']:g}"
    assert row == ["1", "v1", demo_sha, DATASET, f"{f1['before']} → {f1['after']}",
                   f"{auroc['before']} → {auroc['after']}", CHECK, f"{check_f1['before']} → {check_f1['after']}",
                   scale, ""], row
    shot(admin, "models-trained.png")

    # 3. the admin activates it; the queued items are scored again under its tag
    choose(admin, "#cs-models-version", f"v1 ({version['sha256'][:12]})")
    admin.click("#cs-models-activate")
    result = wait_text(admin, "#cs-models-result", "is active")
    assert f"Version 1 is active ({tag}). Its dataset {DATASET}'s queued items are scored again" in result, result
    rescored = wait_text(admin, "#cs-models-progress", f"Re-scoring {DATASET} with {tag}: done", timeout=60_000)
    assert re.search(r"done, (\d+)/\1 queued items", rescored), rescored
    assert "running" not in admin.inner_text("#cs-models-result")  # no stale status left beside the button
    wait_text(admin, "#cs-models-versions", "✓")
    assert table_row(admin, "#cs-models-versions", 0)[-1] == "✓"
    shot(admin, "models-activated.png")

    # 4. the item on screen, looked at again, and the annotator's next item show the new version's suggestions
    annotator.click("#cs-next")  # the open draft again: its default-model suggestions are not kept
    wait_text(annotator, "#cs-suggested", f"model version {tag}")
    annotator.click("#cs-submit")
    wait_text(annotator, "#cs-saved", f"item {second['item_id']} submitted")
    third = workflow.next_item(store, ann)
    assert third["item_id"] != second["item_id"]
    wait_text(annotator, "#cs-annotate", f"Item {third['item_id']}")
    hint = wait_text(annotator, "#cs-suggested", f"model version {tag}")
    assert f"Model suggestions from model version {tag} (infometic)" in hint, hint
    with store.read() as session:  # what the page names is what the store holds for that item
        stored = set(session.scalars(select(Prediction.model_version)
                                     .where(Prediction.caption_id == third["item_id"])))
    assert stored == {tag}
    shot(annotator, "annotate-new-version.png")

    # 5. the admin goes back to the default model; the item on screen, looked at again, follows it
    choose(admin, "#cs-models-version", "the default model")
    admin.click("#cs-models-activate")
    wait_text(admin, "#cs-models-result", "The default model is active again.")
    wait_text(admin, "#cs-models-progress", f"Re-scoring {DATASET} with {DEFAULT_TAG}: done", timeout=60_000)
    assert list_versions(store)[0]["active"] is False
    annotator.click("#cs-next")
    hint = wait_text(annotator, "#cs-suggested", "the server's default model")
    assert "Model suggestions from the server's default model (infometic)" in hint, hint
    admin.close()
    annotator.close()
