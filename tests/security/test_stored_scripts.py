"""Stored scripts, in a real browser over HTTPS (a team's deployment): text one
user gives is put through every place it reaches another user's screen, and
no script in it may run, no request may leave for another site, none may carry
the session. The page runs under its own Content-Security-Policy here (the UI
tests set it aside for their waits). On a15ad8a the only policy was
`frame-ancestors 'none'`, and any script on the page could read the session
cookie from `/gradio_api/token`."""
from __future__ import annotations

import json
import time

import pytest

from annotation_support import make_images, write_jsonl
from security_support import ADMIN, self_signed_certificate

PAYLOADS = ['<img src=x onerror="__pwned(\'img\')">', "<script>__pwned('script')</script>",
            '<svg onload="__pwned(\'svg\')"></svg>', "[a link](javascript:__pwned('markdown'))",
            '<a href="javascript:__pwned(\'anchor\')">a link</a>', '<iframe srcdoc="<script>parent.__pwned(1)</script>">']
CAPTION = "a red circle " + " ".join(PAYLOADS)
DATASET = 'shapes<img src=x onerror="__pwned(\'dataset\')">'
ATTACKER = "<img/src=x/onerror=__pwned('user')>"  # a user name: no spaces, no ':'

# Every component type of the page that draws text, and where a user's text reaches it. A component type
# added to the page and not listed here fails test_every_component_that_draws_text_is_listed.
PLACES = {
    "highlightedtext": "Annotate and Inspect: a caption's words (imported captions, Label Studio and COCO imports)",
    "dataframe": "Explore, Admin, Benchmark, Compare: captions, dataset and user names, agreement per annotator, "
                 "the audit log (names, targets)",
    "dropdown": "Explore, Benchmark, Admin, Compare: dataset names",
    "markdown": "the banner, Annotate's item line (dataset name, item id), Inspect's phrases, the signed-in line",
    "html": "Annotate: ties (a caption's words), progress, keys",
    "textbox": "Inspect's captions and references, Annotate's flag comment (the user's own)",
    "radio": "fixed choices only (modes, orders)",
    "checkboxgroup": "fixed choices only (metrics)",
    "gallery": "Annotate's region thumbnails (images, captions none)",
    "code": "Admin: the import report (row errors quote ids from the file)",
    "plot": "Benchmark: figures (metric names only)",
}
TEXT_TYPES = {"markdown", "html", "dataframe", "highlightedtext", "textbox", "dropdown", "radio", "checkboxgroup",
              "gallery", "code", "plot", "json", "label", "chatbot", "annotatedimage", "highlight", "model3d"}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A team's server over HTTPS whose store holds the payloads: a dataset named with one, captions full of
    them, a user named with one who labelled and flagged an item with a comment of them."""
    from capscope.annotation import workflow
    from capscope.annotation.importer import ImportOptions, import_captions
    from capscope.annotation.users import add_user, authenticate
    from capscope.server.api import create_app
    from capscope.ui.page import mount_ui
    from ui_support import Served

    folder = tmp_path_factory.mktemp("stored")
    key, cert = self_signed_certificate(folder)
    app = create_app(f"sqlite:///{folder / 'team.db'}")
    store = app.state.store
    add_user(store, *ADMIN, role="admin")
    add_user(store, ATTACKER, "attacker-password-1")
    names = make_images(folder / "images", 2)
    rows = [{"id": f"x{i}", "image": names[i % 2], "caption": CAPTION, "references": [CAPTION]} for i in range(3)]
    report = import_captions(store, write_jsonl(folder / "rows.jsonl", rows), folder / "images",
                             ImportOptions(dataset=DATASET, annotators_per_item=2, regions="classic", progress=False))
    assert report.added == 3, report.errors
    attacker = authenticate(store, ATTACKER, "attacker-password-1")
    item = workflow.next_item(store, attacker)
    workflow.save_labels(store, attacker, item["item_id"], [0, 1], [0], "submitted")
    workflow.add_flag(store, attacker, item["item_id"], "comment", " ".join(PAYLOADS))
    app = mount_ui(app, seed=False)
    with Served(app, ssl_keyfile=str(key), ssl_certfile=str(cert)) as served:
        yield served


@pytest.mark.slow
@pytest.mark.browser
def test_no_stored_script_runs_and_no_request_leaves(stored):
    from ui_support import launched_chromium

    ran, left = [], []
    for chromium in launched_chromium():
        context = chromium.new_context(viewport={"width": 1400, "height": 1000}, ignore_https_errors=True)
        context.expose_function("__pwned", lambda where=None: ran.append(where))
        page = context.new_page()
        page.on("request", lambda request: left.append(request.url)
                if not request.url.startswith((stored.url, "data:", "blob:")) else None)
        sent = []
        page.on("request", lambda request: sent.append((request.url, request.post_data or "")))
        page.goto(stored.url + "/")
        page.fill("input[type=text]", ADMIN[0])
        page.fill("input[type=password]", ADMIN[1])
        page.keyboard.press("Enter")
        page.wait_for_selector("#cs-caption-a", timeout=30_000)
        session = [c["value"] for c in context.cookies() if c["name"].startswith("access-token")]
        assert session
        seen = {}
        for tab in ("Annotate", "Explore", "Benchmark", "Admin", "Compare", "Inspect"):
            page.get_by_role("tab", name=tab).click()
            time.sleep(2.0)
            seen[tab] = page.locator("body").inner_text().count("__pwned")
        page.locator("#cs-caption-a textarea").fill(CAPTION)  # Inspect: the user's own text, drawn back
        page.locator("#cs-caption-a textarea").press("End")
        page.keyboard.type(" ")
        time.sleep(3.0)
        seen["Inspect, typed"] = page.locator("body").inner_text().count("__pwned")
        for link in page.locator("a[href^='javascript:']").all():
            link.click(force=True, no_wait_after=True)
        time.sleep(0.5)
        # what a stored script would have done first: read the session through the server
        token = page.evaluate("async () => (await fetch('/gradio_api/token')).status")
        context.close()
    assert ran == [], f"scripts ran: {ran}"
    assert left == [], f"requests left for other sites: {left}"
    assert not [url for url, body in sent if any(value in url or value in body for value in session)]
    assert token == 404
    # the payloads were drawn as text where the test expects them (else the test would prove nothing)
    assert seen["Annotate"] and seen["Explore"] and seen["Admin"], seen


def test_every_component_that_draws_text_is_listed(stored):
    import httpx

    client = httpx.Client(base_url=stored.url, verify=False, timeout=60)
    assert client.post("/login", data={"username": ADMIN[0], "password": ADMIN[1]}).status_code == 200
    types = {component["type"] for component in client.get("/config").json()["components"]}
    assert types & TEXT_TYPES <= set(PLACES), sorted(types & TEXT_TYPES - set(PLACES))


def test_the_stored_text_is_kept_as_it_was_given(stored):
    """Nothing is escaped or stripped on the way in: the page's policy, not the store, keeps it inert."""
    import httpx

    client = httpx.Client(base_url=stored.url, verify=False, timeout=60, auth=ADMIN)
    rows = [json.loads(line) for line in client.get("/api/export", params={"dataset": DATASET}).text.splitlines()]
    assert rows and all(row["caption"] == CAPTION for row in rows)
