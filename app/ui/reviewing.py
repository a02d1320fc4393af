"""Review: the reviewer's tab (reviewers and admins; annotation/review.py).

One pending judgement at a time: the item's picture and caption with the
annotator's labels drawn as Annotate draws them. The reviewer toggles words
and regions to correct them (a working copy in the page, nothing saved until a
decision; the change against the annotator's labels is shown as a diff), then
accepts, corrects, or sends the judgement back with a comment. Keys as in
Annotate: 1-9, 0 regions, u/z undo, k skip, n next, s/Enter decide as shown
(accept when nothing changed, else correct), a accept, c correct, r send back
(an empty comment box takes the focus first). Admins turn review on or off per
dataset at the top of the tab. Every handler reads the judgement back from the
store and checks the user's role there: a hidden tab is no permission."""
from __future__ import annotations

import functools
import html
from datetime import datetime

import gradio as gr

from capscope.annotation import review, workflow
from capscope.annotation.refusals import AnnotationError
from capscope.annotation.users import UserInfo, get_user
from capscope.db import Store
from capscope.metrics.images import read_image
from capscope.pictures import draw as ui_draw

ALL = "all datasets with review on"
MAX_REGION_KEYS = 10  # as in Annotate: keys 1-9 and 0
KEYS_HELP = ("<span class='cs-keys'>Keys: <kbd>1</kbd>–<kbd>9</kbd>, <kbd>0</kbd> region 1–10 · "
             "<kbd>s</kbd>/<kbd>Enter</kbd> decide as shown (accept, or correct when you changed labels) · "
             "<kbd>a</kbd> accept · <kbd>c</kbd> correct · <kbd>r</kbd> send back (write the comment first) · "
             "<kbd>u</kbd>/<kbd>z</kbd> undo your last change · <kbd>k</kbd> skip · <kbd>n</kbd> next · "
             "<kbd>←</kbd>/<kbd>→</kbd> + <kbd>Enter</kbd> on words</span>")


@functools.lru_cache(maxsize=32)
def _image(path: str):
    return read_image(path)


# ---------------------------------------------------------------- the working copy

def fresh_work(view: dict | None) -> dict:
    """The reviewer's working copy of the judgement's labels, and the undo steps."""
    if view is None:
        return {"assignment": None, "tokens": [], "regions": [], "junk": [], "steps": []}
    labels = view["labels"]
    return {"assignment": view["assignment_id"], "tokens": list(labels["incorrect_tokens"]),
            "regions": list(labels["mentioned_regions"]), "junk": list(labels["junk_regions"]), "steps": []}


def toggled(work: dict, part: str, index: int) -> dict:
    """The working copy with one word ("tokens") or region ("regions") flipped; a region
    marked mentioned is no junk any more (as in Annotate)."""
    changed = {**work, "steps": [*work["steps"], {k: work[k] for k in ("tokens", "regions", "junk")}]}
    values = set(work[part]) ^ {index}
    changed[part] = sorted(values)
    if part == "regions" and index in values:
        changed["junk"] = sorted(set(work["junk"]) - {index})
    return changed


def undone(work: dict) -> dict:
    if not work["steps"]:
        return work
    return {**work, **work["steps"][-1], "steps": work["steps"][:-1]}


def changes(view: dict, work: dict) -> dict:
    """The working copy against the annotator's labels (review.label_diff's shape)."""
    labels = view["labels"]
    before = workflow.LabelState(frozenset(labels["incorrect_tokens"]), frozenset(labels["mentioned_regions"]),
                                 "submitted", frozenset(labels["junk_regions"]))
    after = workflow.LabelState(frozenset(work["tokens"]), frozenset(work["regions"]), "submitted",
                                frozenset(work["junk"]))
    return review.label_diff(before, after)


# ---------------------------------------------------------------- drawing

def _when(stamp: str | None, form: str = "%Y-%m-%d %H:%M UTC") -> str:
    if not stamp:
        return ""
    try:
        return datetime.fromisoformat(stamp.rstrip("Z")).strftime(form)
    except ValueError:
        return stamp


def header(view: dict, waiting: int) -> str:
    text = (f"**Judgement by {html.escape(view['annotator'])}** · item {view['item_id']} · "
            f"`{html.escape(view['id'])}` · dataset {html.escape(view['dataset'])} · submitted "
            f"{_when(view['submitted_at'])} · {waiting} waiting for you")
    state = view.get("review") or {}
    if state.get("status") not in (None, "pending"):
        text += f" · **{state['status']}** by {html.escape(state.get('reviewer') or '')}"
    elif view.get("since_returned") is not None and state.get("comment"):
        text += (f"\n\nSent back before by {html.escape(state.get('reviewer') or '')}: "
                 f"“{html.escape(state['comment'])}”")
    return text


def token_values(view: dict, work: dict) -> list[tuple[str, float | None]]:
    """Score mode: red for words marked incorrect by both, lighter red for words the reviewer
    marks, purple for the annotator's marks the reviewer takes away."""
    from capscope.ui.caption_shading import token_segments

    theirs, mine = set(view["labels"]["incorrect_tokens"]), set(work["tokens"])
    values = []
    for i, text in enumerate(token_segments(view["caption"], view["tokens"])):
        score = 1.0 if i in theirs and i in mine else 0.5 if i in mine else -0.6 if i in theirs else None
        values.append((text, score))
    return values


def describe(view: dict, diff: dict) -> str:
    """The diff as a line: + what the reviewer adds, − what they take away."""
    if not diff:
        return ("<div id='cs-review-diff-text'>No changes: <b>Accept</b> keeps the annotator's labels. Click "
                "words and regions to correct them.</div>")
    words = view["tokens"]
    names = {"incorrect_tokens": lambda i: f"word “{html.escape(words[i]['text'])}” incorrect",
             "mentioned_regions": lambda i: f"region {i + 1} mentioned",
             "junk_regions": lambda i: f"region {i + 1} junk",
             "links": lambda pair: f"“{html.escape(words[pair[0]]['text'])}” → region {pair[1] + 1}"}
    parts = []
    for part, change in diff.items():
        parts += [f"<span class='cs-diff-add'>+ {names[part](x)}</span>" for x in change["added"]]
        parts += [f"<span class='cs-diff-remove'>− {names[part](x)}</span>" for x in change["removed"]]
    return f"<div id='cs-review-diff-text'><b>Your correction</b>: {' · '.join(parts)}</div>"


def history_html(view: dict) -> str:
    rows = []
    for h in view["history"]:
        if h["action"] in ("start",):
            continue
        comment = html.escape(h["comment"] or "")
        rows.append(f"<tr><td>{h['revision']}</td><td>{html.escape(h['action'])}</td>"
                    f"<td>{html.escape(h['by'])}</td><td>{html.escape(h['status'])}</td>"
                    f"<td>{len(h['incorrect_tokens'])}</td><td>{len(h['mentioned_regions'])}</td>"
                    f"<td>{comment}</td><td>{_when(h['at'], '%m-%d %H:%M:%S')}</td></tr>")
    return ("<table class='cs-review-history'><tr><th>#</th><th>step</th><th>by</th><th>status</th>"
            "<th>wrong words</th><th>regions</th><th>comment</th><th>at (UTC)</th></tr>" + "".join(rows) + "</table>")


def picture(view: dict, work: dict) -> tuple:
    image = _image(view["_path"])
    boxes = ui_draw.shown_boxes(view["regions"])
    removed = set(view["labels"]["mentioned_regions"]) - set(work["regions"])
    overlay = ui_draw.labels_overlay(image, boxes, set(work["regions"]), removed, set(work["junk"]),
                                     masks=ui_draw.shown_masks(view["regions"]))
    return overlay, ui_draw.thumbnails(image, boxes, set(work["regions"]))


# ---------------------------------------------------------------- plain logic

class Reviewing:
    """What the Review tab does for one user, independent of Gradio."""

    def __init__(self, store: Store, lease_seconds: int = workflow.LEASE_SECONDS):
        self.store, self.lease = store, lease_seconds

    def user(self, name: str | None) -> UserInfo:
        if not name:
            raise AnnotationError("not logged in")
        user = get_user(self.store, name)
        review.check_reviewer(user)
        return user

    def _with_path(self, user: UserInfo, view: dict | None) -> dict | None:
        if view is not None:
            view["_path"] = workflow.image_path(self.store, user, view["image_id"])
        return view

    def next(self, user: UserInfo, dataset: str | None, after: int | None = None) -> dict | None:
        found = review.next_for_review(self.store, user, dataset, after)
        if found is None and after is not None:  # past the last one: from the first again
            found = review.next_for_review(self.store, user, dataset)
        return self._with_path(user, found)

    def get(self, user: UserInfo, assignment_id: int) -> dict:
        return self._with_path(user, review.get_review(self.store, user, assignment_id))

    def waiting(self, user: UserInfo, dataset: str | None) -> int:
        return review.pending_count(self.store, user, dataset)

    def decide(self, user: UserInfo, view: dict, work: dict, decision: str, comment: str | None) -> dict:
        corrected = {}
        if decision == "correct":
            corrected = {"incorrect_tokens": work["tokens"], "mentioned_regions": work["regions"],
                         "junk_regions": work["junk"]}
        return review.decide(self.store, user, view["assignment_id"], decision, comment,
                             lease_seconds=self.lease, **corrected)


def dataset_choice(value: str | None) -> str | None:
    return None if not value or value == ALL else value


def settings_text(settings: list[dict]) -> str:
    if not settings:
        return "No datasets yet."
    lines = [f"- **{html.escape(s['dataset'])}**: review {'on' if s['review'] else 'off'} · {s['pending']} "
             f"pending · {s['returned']} sent back" for s in settings]
    return "\n".join(lines)


# ---------------------------------------------------------------- Gradio layer

OUTPUTS = ("view", "work", "header", "image", "gallery", "tokens", "diff", "history", "status", "comment")
DB_QUEUE = {"concurrency_id": "db", "concurrency_limit": 4, "show_progress": "hidden"}
CLICKS = {"trigger_mode": "multiple", "api_visibility": "private", **DB_QUEUE}


def build_review(store: Store, lease_seconds: int | None = None) -> dict:
    reviewing = Reviewing(store, **({"lease_seconds": lease_seconds} if lease_seconds else {}))
    c: dict = {}
    with gr.Column(elem_id="cs-review"):
        with gr.Accordion("Review per dataset (admins)", open=False, visible=False) as c["admin"]:
            with gr.Row():
                c["switch_dataset"] = gr.Dropdown([], label="Dataset", scale=2, elem_id="cs-review-switch-dataset")
                c["switch_on"] = gr.Checkbox(False, label="Review on: submitted judgements wait for a reviewer",
                                             scale=2, elem_id="cs-review-switch-on")
                c["switch_save"] = gr.Button("Save", size="sm", scale=1, elem_id="cs-review-switch-save")
            c["settings"] = gr.Markdown("", elem_id="cs-review-settings")
        with gr.Row():
            c["dataset"] = gr.Dropdown([ALL], value=ALL, label="Review in", scale=1, elem_id="cs-review-dataset")
            c["header"] = gr.Markdown("Open this tab to review.", elem_id="cs-review-header")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                c["image"] = gr.Image(label="Click a region to mark it mentioned or not (dashed: the "
                                            "annotator's marks you took away)", interactive=False, buttons=[],
                                      height=420, elem_id="cs-review-image")
                c["gallery"] = gr.Gallery(label="Regions (click to toggle)", columns=10, rows=1, height=150,
                                          allow_preview=False, object_fit="contain", interactive=False,
                                          elem_id="cs-review-gallery")
            with gr.Column(scale=2):
                c["tokens"] = gr.HighlightedText(label="Caption · red: incorrect · light red: you added · "
                                                       "purple: you took it away", interactive=False,
                                                 elem_id="cs-review-tokens", elem_classes="cs-tokens")
                c["diff"] = gr.HTML("", elem_id="cs-review-diff")
                c["comment"] = gr.Textbox(label="Comment (needed to send back; shown to the annotator)", lines=2,
                                          max_length=review.MAX_COMMENT_CHARS, elem_id="cs-review-comment")
                with gr.Row():
                    c["accept"] = gr.Button("Accept (a)", variant="primary", elem_id="cs-review-accept")
                    c["correct"] = gr.Button("Correct (c)", elem_id="cs-review-correct")
                    c["return"] = gr.Button("Send back (r)", variant="stop", elem_id="cs-review-return")
                with gr.Row():
                    c["undo"] = gr.Button("Undo (u)", elem_id="cs-review-undo")
                    c["skip"] = gr.Button("Skip (k)", elem_id="cs-review-skip")
                    c["next"] = gr.Button("Next (n)", elem_id="cs-review-next")
                c["status"] = gr.Markdown("", elem_id="cs-review-status")
                gr.HTML(KEYS_HELP)
                with gr.Accordion("History of this judgement", open=True):
                    c["history"] = gr.HTML("", elem_id="cs-review-history")
        with gr.Row(elem_classes="cs-hidden"):
            c["decide"] = gr.Button("decide as shown", elem_id="cs-review-submit")
            c["region_keys"] = [gr.Button(str(i), elem_id=f"cs-review-region-{i}")
                                for i in range(1, MAX_REGION_KEYS + 1)]
    c["view"] = gr.State(None)
    c["work"] = gr.State(fresh_work(None))
    _wire(reviewing, c)
    return c


class ReviewHandlers:
    """The tab's event handlers; each returns every output (OUTPUTS)."""

    def __init__(self, reviewing: Reviewing):
        self.reviewing = reviewing

    def _draw(self, user: UserInfo, view: dict | None, work: dict, status: str, dataset, clear: bool = False):
        comment = "" if clear else gr.skip()
        if view is None:
            return (None, fresh_work(None), "**Nothing waits for review.** Judgements appear here once "
                    "submitted in a dataset with review on.", None, [], [], "", "", status, comment)
        overlay, thumbs = picture(view, work)
        waiting = self.reviewing.waiting(user, dataset_choice(dataset))
        return (view, work, header(view, waiting), overlay, thumbs, token_values(view, work),
                describe(view, changes(view, work)), history_html(view), status, comment)

    def _run(self, request, dataset, step):
        """`step(user) -> (view, work, status, clear)`, drawn; refusals go to the status line."""
        try:
            user = self.reviewing.user(getattr(request, "username", None))
        except AnnotationError as err:
            return (None, fresh_work(None), f"**{html.escape(str(err))}**", None, [], [], "", "", "",
                    gr.skip())
        try:
            view, work, status, clear = step(user)
        except AnnotationError as err:
            return (*(gr.skip() for _ in OUTPUTS[:-2]), f"⚠ {html.escape(str(err))}", gr.skip())
        return self._draw(user, view, work, status, dataset, clear)

    def open(self, dataset, request: gr.Request):
        def step(user):
            view = self.reviewing.next(user, dataset_choice(dataset))
            return view, fresh_work(view), "", True
        return self._run(request, dataset, step)

    def skip(self, view, dataset, request: gr.Request):
        def step(user):
            after = view["assignment_id"] if view else None
            found = self.reviewing.next(user, dataset_choice(dataset), after)
            return found, fresh_work(found), "skipped" if view else "", True
        return self._run(request, dataset, step)

    def _current(self, user, view, work):
        """The judgement on screen read again, with the working copy when it is this judgement's."""
        fresh = self.reviewing.get(user, view["assignment_id"])
        return fresh, (work if work.get("assignment") == fresh["assignment_id"] else fresh_work(fresh))

    def toggle(self, view, work, dataset, part: str, index: int, request):
        def step(user):
            if view is None:
                raise AnnotationError("no judgement on screen")
            fresh, current = self._current(user, view, work)
            size = len(fresh["tokens"]) if part == "tokens" else len(fresh["regions"])
            if not 0 <= index < size:
                raise AnnotationError(f"there is no {'word' if part == 'tokens' else 'region'} {index + 1}")
            return fresh, toggled(current, part, index), "", False
        return self._run(request, dataset, step)

    def on_word(self, view, work, dataset, evt: gr.SelectData, request: gr.Request):
        return self.toggle(view, work, dataset, "tokens", int(evt.index), request)

    def on_thumbnail(self, view, work, dataset, evt: gr.SelectData, request: gr.Request):
        return self.toggle(view, work, dataset, "regions", int(evt.index), request)

    def on_image(self, view, work, dataset, evt: gr.SelectData, request: gr.Request):
        if view is None:
            return self.open(dataset, request)
        region = ui_draw.clicked_region([r["box"] for r in view["regions"]], (view["width"], view["height"]),
                                        evt.index)
        if region is None:
            return (*(gr.skip() for _ in OUTPUTS[:-2]), "no region under that point", gr.skip())
        return self.toggle(view, work, dataset, "regions", region, request)

    def on_region_key(self, key, view, work, dataset, request: gr.Request):
        return self.toggle(view, work, dataset, "regions", int(key) - 1, request)

    def undo(self, view, work, dataset, request: gr.Request):
        def step(user):
            if view is None:
                raise AnnotationError("no judgement on screen")
            fresh, current = self._current(user, view, work)
            return fresh, undone(current), "" if current["steps"] else "nothing of yours to undo", False
        return self._run(request, dataset, step)

    def decide(self, view, work, dataset, comment, decision: str, request):
        def step(user):
            if view is None:
                raise AnnotationError("no judgement on screen")
            fresh, current = self._current(user, view, work)
            chosen = decision
            if chosen == "shown":
                chosen = "correct" if changes(fresh, current) else "accept"
            if chosen == "accept" and changes(fresh, current):
                raise AnnotationError("you changed the labels: Correct (c) keeps your changes, Undo (u) takes "
                                      "them back")
            done = self.reviewing.decide(user, fresh, current, chosen, comment)
            note = f"item {done['item_id']} by {html.escape(fresh['annotator'])}: {done['decision']}"
            found = self.reviewing.next(user, dataset_choice(dataset), fresh["assignment_id"])
            if found is None or found["assignment_id"] == fresh["assignment_id"]:
                # nothing else waits: the judgement just decided stays on screen, with its whole history
                found = self.reviewing.get(user, fresh["assignment_id"])
                note += " · nothing else waits for review"
            return found, fresh_work(found), note, True
        return self._run(request, dataset, step)

    def accept(self, view, work, dataset, comment, request: gr.Request):
        return self.decide(view, work, dataset, comment, "accept", request)

    def correct(self, view, work, dataset, comment, request: gr.Request):
        return self.decide(view, work, dataset, comment, "correct", request)

    def send_back(self, view, work, dataset, comment, request: gr.Request):
        return self.decide(view, work, dataset, comment, "return", request)

    def as_shown(self, view, work, dataset, comment, request: gr.Request):
        return self.decide(view, work, dataset, comment, "shown", request)

    # ---- the tab's setup and the admin switch

    def choices(self, request: gr.Request):
        """On page load: the datasets to review in, and the admin switch for admins only."""
        try:
            user = get_user(self.reviewing.store, getattr(request, "username", None) or "")
        except AnnotationError:
            user = None
        if user is None or not review.may_review(user):  # the tab is hidden: nothing of it goes to the page
            return (gr.Dropdown(choices=[ALL], value=ALL), gr.Accordion(visible=False), gr.Dropdown(choices=[]),
                    gr.Checkbox(value=False), "")
        settings = review.review_settings(self.reviewing.store)
        names = [s["dataset"] for s in settings]
        reviewed = [s["dataset"] for s in settings if s["review"]]
        admin = bool(user and user.is_admin)
        first = names[0] if names else None
        on = bool(settings and settings[0]["review"])
        return (gr.Dropdown(choices=[ALL, *reviewed], value=ALL), gr.Accordion(visible=admin),
                gr.Dropdown(choices=names, value=first), gr.Checkbox(value=on),
                settings_text(settings) if admin else "")

    def switch_shown(self, dataset, request: gr.Request):
        settings = {s["dataset"]: s for s in review.review_settings(self.reviewing.store)}
        return gr.Checkbox(value=bool(settings.get(dataset, {}).get("review")))

    def switch(self, dataset, on, request: gr.Request):
        try:
            user = get_user(self.reviewing.store, getattr(request, "username", None) or "")
            if not dataset:
                raise AnnotationError("pick a dataset")
            review.set_review(self.reviewing.store, user, dataset, bool(on))
            note = ""
        except AnnotationError as err:
            note = f"⚠ {html.escape(str(err))}\n\n"
        settings = review.review_settings(self.reviewing.store)
        reviewed = [s["dataset"] for s in settings if s["review"]]
        return gr.Dropdown(choices=[ALL, *reviewed]), note + settings_text(settings)


def _wire(reviewing: Reviewing, c: dict) -> None:
    handlers = ReviewHandlers(reviewing)
    outputs = [c[name] for name in OUTPUTS]
    state = [c["view"], c["work"], c["dataset"]]
    c["tokens"].select(handlers.on_word, state, outputs, **CLICKS)
    c["gallery"].select(handlers.on_thumbnail, state, outputs, **CLICKS)
    c["image"].select(handlers.on_image, state, outputs, **CLICKS)
    for button in c["region_keys"]:
        button.click(handlers.on_region_key, [button, *state], outputs, **CLICKS)
    c["undo"].click(handlers.undo, state, outputs, **CLICKS)
    decided = [*state, c["comment"]]
    for name, fn in (("accept", handlers.accept), ("correct", handlers.correct), ("return", handlers.send_back),
                     ("decide", handlers.as_shown)):
        c[name].click(fn, decided, outputs, api_visibility="private", **DB_QUEUE)
    c["skip"].click(handlers.skip, [c["view"], c["dataset"]], outputs, api_visibility="private", **DB_QUEUE)
    c["next"].click(handlers.open, [c["dataset"]], outputs, api_visibility="private", **DB_QUEUE)
    c["dataset"].input(handlers.open, [c["dataset"]], outputs, api_visibility="private", **DB_QUEUE)
    c["switch_dataset"].input(handlers.switch_shown, [c["switch_dataset"]], [c["switch_on"]],
                              api_visibility="private", **DB_QUEUE)
    c["switch_save"].click(handlers.switch, [c["switch_dataset"], c["switch_on"]], [c["dataset"], c["settings"]],
                           api_visibility="private", **DB_QUEUE)
    c["load"] = [(handlers.choices, None, [c["dataset"], c["admin"], c["switch_dataset"], c["switch_on"],
                                           c["settings"]])]
    c["open"] = (handlers.open, [c["dataset"]], outputs)
