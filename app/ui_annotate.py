"""Annotate: the annotator's queue, one click = one saved label.

The database is the source of truth: every handler reads the item and its
labels back from the store (`capscope.annotation.workflow`) and redraws from
that, so a reload, a second tab or a lost response never shows stale labels.
Each click saves inside its own handler and answers with the saved revision.
Handlers taking `gr.SelectData` only unpack the event and call a plain
function that takes the index."""
from __future__ import annotations

import functools
import html
import logging
import threading
from datetime import datetime

import gradio as gr
from PIL import Image

from capscope import ui_draw
from capscope.annotation import browse, workflow
from capscope.annotation.errors import AnnotationError
from capscope.annotation.users import UserInfo, get_user
from capscope.db import Store
from capscope.ui_models import TOKEN_METRICS, Models

log = logging.getLogger(__name__)

MAX_REGION_KEYS = 10
KEYS_HELP = ("<span class='cs-keys'>Keys: <kbd>1</kbd>–<kbd>9</kbd>, <kbd>0</kbd> region 1–10 · "
             "<kbd>s</kbd>/<kbd>Enter</kbd> submit &amp; next · <kbd>k</kbd> skip · "
             "<kbd>u</kbd>/<kbd>z</kbd> undo · "
             "<kbd>n</kbd> next · <kbd>b</kbd> previous (submitted items stay editable) · <kbd>p</kbd> model suggestions · <kbd>g</kbd> guidelines · "
             "<kbd>←</kbd>/<kbd>→</kbd> + <kbd>Enter</kbd> on words</span>")


def guidelines_text() -> str:
    from importlib import resources

    return resources.files("capscope.static").joinpath("guidelines.md").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=64)
def _image(path: str) -> Image.Image:
    with Image.open(path) as im:
        return im.convert("RGB")


# ---------------------------------------------------------------- model suggestions

class Suggestions:
    """Model pre-labels per item: stored predictions when the store has them,
    else computed once with the UI's scorer on the item's own tokens and regions."""

    def __init__(self, store: Store, models: Models | None):
        self.store, self.models = store, models
        self._cache: dict[int, tuple[set[int], set[int], str]] = {}

    def cached(self, item_id: int) -> tuple[set[int], set[int], str] | None:
        return self._cache.get(item_id)

    def get(self, user: UserInfo, item: dict, compute: bool = True) -> tuple[set[int], set[int], str] | None:
        """Cached, else stored, else (with `compute`) scored now."""
        if item["item_id"] in self._cache:
            return self._cache[item["item_id"]]
        found = self._stored(user, item) or (self._computed(item) if compute else None)
        if found is not None:
            self._cache[item["item_id"]] = found
        return found

    def _stored(self, user: UserInfo, item: dict):
        full = workflow.get_item(self.store, user, item["item_id"], include_predictions=True)
        stored = {p["metric"]: p for p in full.get("predictions") or [] if p.get("token_scores")}
        metric = next((m for m in TOKEN_METRICS if m in stored), None)
        if metric is None:
            return None
        return _decided(item, stored[metric]["token_scores"], stored[metric].get("region_scores") or [], metric)

    def _computed(self, item: dict):
        if self.models is None:
            return None
        try:
            row = self.models.score(_image(self.store_path(item)), item["caption"],
                                    regions=[{"box": r["box"]} for r in item["regions"]], tokens=item["tokens"])
        except Exception as err:  # a missing model must not break annotation
            log.warning("pre-labels unavailable for item %s: %s", item["item_id"], err)
            return None
        metric = next((m for m in TOKEN_METRICS if m in row["metrics"]), None)
        if metric is None:
            return None
        result = row["metrics"][metric]
        wrong = {i for i, c in enumerate(result.get("token_correct") or []) if c is False}
        mentioned = {i for i, m in enumerate(result.get("region_mentioned") or []) if m}
        return wrong, mentioned, metric

    def store_path(self, item: dict) -> str:
        return item["_path"]


def _decided(item: dict, token_scores: list, region_scores: list, metric: str):
    """Stored scores to (wrong tokens, mentioned regions) by the metric's own threshold."""
    from capscope.ui_inspect import THRESHOLDS

    beta = THRESHOLDS.get(metric, 0.1)
    wrong = {i for i, (t, s) in enumerate(zip(item["tokens"], token_scores))
             if t["semantic"] and s is not None and s <= beta}
    mentioned = {i for i, s in enumerate(region_scores) if s is not None and s > beta}
    return wrong, mentioned, metric


# ---------------------------------------------------------------- plain logic

class Annotator:
    """What the Annotate tab does for one user, independent of Gradio."""

    def __init__(self, store: Store, models: Models | None = None, lease_seconds: int = workflow.LEASE_SECONDS):
        self.store = store
        self.lease = lease_seconds
        self.suggestions = Suggestions(store, models)
        self._locks: dict[int, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def lock_for(self, user: UserInfo) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(user.id, threading.Lock())

    def user(self, name: str | None) -> UserInfo:
        if not name:
            raise AnnotationError("not logged in")
        return get_user(self.store, name)

    def item(self, user: UserInfo, item_id: int) -> dict:
        item = workflow.get_item(self.store, user, item_id)
        item["_path"] = workflow.image_path(self.store, user, item["image_id"])
        return item

    def next(self, user: UserInfo) -> dict | None:
        item = workflow.next_item(self.store, user, lease_seconds=self.lease)
        if item is not None:
            item["_path"] = workflow.image_path(self.store, user, item["image_id"])
        return item

    def previous(self, user: UserInfo, item_id: int | None) -> dict | None:
        item = workflow.previous_item(self.store, user, item_id)
        if item is not None:
            item["_path"] = workflow.image_path(self.store, user, item["image_id"])
        return item

    def toggle_token(self, user: UserInfo, item_id: int, index: int) -> dict:
        return workflow.toggle_token(self.store, user, item_id, index, lease_seconds=self.lease)

    def toggle_region(self, user: UserInfo, item_id: int, index: int) -> dict:
        return workflow.toggle_region(self.store, user, item_id, index, lease_seconds=self.lease)

    def region_at_click(self, user: UserInfo, item_id: int, point) -> int | None:
        item = self.item(user, item_id)
        return ui_draw.clicked_region([r["box"] for r in item["regions"]], (item["width"], item["height"]), point)

    def undo(self, user: UserInfo, item_id: int) -> dict:
        return workflow.undo(self.store, user, item_id, lease_seconds=self.lease)

    def submit(self, user: UserInfo, item_id: int) -> dict:
        return workflow.submit(self.store, user, item_id, lease_seconds=self.lease)

    def skip(self, user: UserInfo, item_id: int) -> dict:
        """Give the item back; a submitted item (reached again through Previous) stays submitted."""
        labels = self.item(user, item_id).get("labels") or {}
        if labels.get("status") == "submitted":
            return labels
        return workflow.skip(self.store, user, item_id, lease_seconds=self.lease)

    def flag(self, user: UserInfo, item_id: int, kind: str, comment: str = "") -> dict:
        return workflow.add_flag(self.store, user, item_id, kind, comment)

    def progress(self, user: UserInfo) -> dict:
        return browse.progress(self.store, user)


def token_values(item: dict, suggested: set[int] | None = None) -> list[tuple[str, float | None]]:
    """Score-mode values: 1.0 (red) for words this annotator marked incorrect;
    a model suggestion, when shown, as a faint 0.3."""
    from capscope.ui_inspect import token_segments

    marked = set(item["labels"]["incorrect_tokens"]) if item.get("labels") else set()
    segments = token_segments(item["caption"], item["tokens"])
    return [(text, 1.0 if i in marked else 0.3 if suggested and i in suggested else None)
            for i, text in enumerate(segments)]


def saved_text(labels: dict | None, note: str = "") -> str:
    if not labels:
        return note
    at = labels.get("saved_at", "")
    try:
        at = datetime.fromisoformat(at.rstrip("Z")).strftime("%H:%M:%S UTC")
    except ValueError:
        pass
    words, regions = len(labels["incorrect_tokens"]), len(labels["mentioned_regions"])
    status = labels["status"]
    text = (f"<span class='cs-ok'>✓ Saved</span> · revision {labels['revision']} · {at} · "
            f"{words} wrong word{'s' * (words != 1)}, {regions} region{'s' * (regions != 1)} mentioned · {status}")
    return f"{text} · {note}" if note else text


def _bar(done: int, total: int) -> str:
    share = 0 if total <= 0 else min(100, round(100 * done / total))
    return f"<div class='cs-progress'><div style='width:{share}%'></div></div>"


def progress_html(progress: dict) -> str:
    me, team = progress.get("me", {}), progress["everyone"]
    mine_total = me.get("submitted", 0) + me.get("available", 0) + me.get("in_progress", 0)
    return (f"<b>Mine</b>: {me.get('submitted', 0)} submitted, {me.get('skipped', 0)} skipped, "
            f"{me.get('available', 0)} more available{_bar(me.get('submitted', 0), mine_total)}"
            f"<b>Everyone</b>: {team['judgements_submitted']} / {team['judgements_needed']} judgements, "
            f"{team['items_complete']} / {team['items']} items complete"
            f"{_bar(team['judgements_submitted'], team['judgements_needed'])}")


def item_header(item: dict) -> str:
    return (f"**Item {item['item_id']}** · `{html.escape(item['id'])}` · dataset {html.escape(item['dataset'])} · "
            f"{len(item['regions'])} regions. Click wrong words; click the regions the caption mentions.")


# ---------------------------------------------------------------- Gradio layer

def build_annotate(annotator: Annotator) -> dict:
    c: dict = {}
    with gr.Column(elem_id="cs-annotate"):
        with gr.Row():
            c["header"] = gr.Markdown("Loading your queue…")
            c["saved"] = gr.Markdown("", elem_id="cs-saved", elem_classes="cs-saved")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                c["image"] = gr.Image(label="Click a region to mark it mentioned", interactive=False, buttons=[],
                                      height=420, elem_id="cs-annotate-image")
                c["gallery"] = gr.Gallery(label="Regions (click to toggle)", columns=10, rows=1, height=150,
                                          allow_preview=False, object_fit="contain", interactive=False,
                                          elem_id="cs-gallery")
            with gr.Column(scale=2):
                c["tokens"] = gr.HighlightedText(label="Caption · click a word to mark it incorrect",
                                                 interactive=False, elem_id="cs-annotate-tokens",
                                                 elem_classes="cs-tokens")
                c["suggested"] = gr.Markdown("", visible=True)
                with gr.Row():
                    c["submit"] = gr.Button("Submit & next (s)", variant="primary", elem_id="cs-submit")
                    c["skip"] = gr.Button("Skip (k)", elem_id="cs-skip")
                with gr.Row():
                    c["previous"] = gr.Button("Previous (b)", elem_id="cs-previous")
                    c["undo"] = gr.Button("Undo (u)", elem_id="cs-undo")
                    c["next"] = gr.Button("Next (n)", elem_id="cs-next")
                c["prelabels"] = gr.Checkbox(False, label="Show model suggestions (p)", elem_id="cs-prelabels")
                gr.HTML(KEYS_HELP)
                with gr.Accordion("Flag this item", open=False):
                    with gr.Row():
                        c["flag_kind"] = gr.Dropdown(list(workflow.FLAG_KINDS), value="unsure", label="Kind",
                                                     scale=1)
                        c["flag_comment"] = gr.Textbox(label="Comment (optional)", scale=2)
                    c["flag"] = gr.Button("Flag", size="sm", elem_id="cs-flag")
                c["progress"] = gr.HTML("", elem_id="cs-progress-box")
                c["guidelines_button"] = gr.Button("Guidelines (g)", size="sm", elem_id="cs-guidelines")
                with gr.Accordion("Guidelines", open=False) as c["guidelines"]:
                    gr.Markdown(guidelines_text())
        with gr.Row(elem_classes="cs-hidden"):
            c["region_keys"] = [gr.Button(str(i), elem_id=f"cs-region-{i}") for i in range(1, MAX_REGION_KEYS + 1)]
    c["item_id"] = gr.State(None)  # which item is on screen; its labels always come from the store
    _wire_annotate(annotator, c)
    return c


def _wire_annotate(annotator: Annotator, c: dict) -> None:
    outputs = [c["item_id"], c["header"], c["image"], c["gallery"], c["tokens"], c["saved"], c["progress"],
               c["suggested"]]

    def render(user: UserInfo, item: dict | None, note: str = "", show_suggestions: bool = False,
               compute: bool = False, words_only: bool = False) -> tuple:
        """Every output; with `words_only` (a word toggled on the same item) the
        picture, thumbnails and header are left as they are, which keeps clicks quick."""
        progress = progress_html(annotator.progress(user))
        if item is None:
            return (None, "**Nothing left in your queue.** Thank you!", None, [], [], note, progress, "")
        # label clicks never run the model: only the suggestions handler (model queue) computes
        suggestion = annotator.suggestions.get(user, item, compute) if show_suggestions else None
        wrong, mentioned = (suggestion[0], suggestion[1]) if suggestion else (None, None)
        chosen = set(item["labels"]["mentioned_regions"]) if item.get("labels") else set()
        image = None if words_only else _image(item["_path"])
        boxes = [r["box"] for r in item["regions"]]
        hint = ""
        if show_suggestions:
            hint = ("Model suggestions (" + suggestion[2] + "): faint red words, dashed boxes." if suggestion
                    else "Model suggestions are being computed…" if not compute
                    else "No model suggestions for this item.")
        if words_only:
            picture = (gr.skip(), gr.skip(), gr.skip())
        else:
            picture = (item_header(item), ui_draw.labels_overlay(image, boxes, chosen, mentioned),
                       ui_draw.thumbnails(image, boxes, chosen))
        return (item["item_id"], *picture, token_values(item, wrong), saved_text(item.get("labels"), note),
                progress, hint)

    def run(request: gr.Request | None, item_id, show, action, *args, compute: bool = False,
            words_only: bool = False) -> tuple:
        """`action(user, item_id, *args)` -> (item, note), drawn; workflow errors go to the status line."""
        try:
            user = annotator.user(request.username if request else None)
        except AnnotationError as err:
            return (None, f"**{html.escape(str(err))}**", None, [], [], "", "", "")
        with annotator.lock_for(user):  # one user's clicks are applied and drawn in order
            try:
                item, note = action(user, item_id, *args)
            except AnnotationError as err:
                item = annotator.item(user, item_id) if item_id else annotator.next(user)
                note = f"⚠ not saved: {html.escape(str(err))}"
            same_item = item is not None and item["item_id"] == item_id
            return render(user, item, note, show, compute, words_only and same_item)

    def open_next(user, item_id):
        return annotator.next(user), ""

    def open_previous(user, item_id):
        earlier = annotator.previous(user, item_id)
        if earlier is not None:
            return earlier, f"item {earlier['item_id']}: submitted earlier; changes are saved to it"
        return (annotator.item(user, item_id) if item_id else annotator.next(user)), "no earlier submitted item"

    def current(user, item_id):
        return (annotator.item(user, item_id) if item_id else annotator.next(user)), ""

    def after(change):
        def act(user, item_id, *args):
            if item_id is None:
                return annotator.next(user), ""
            labels = change(user, item_id, *args)
            item = annotator.item(user, item_id)
            item["labels"] = labels
            return item, ""
        return act

    def finish(step, word):
        def act(user, item_id):
            if item_id is None:
                return annotator.next(user), ""
            status = step(user, item_id)["status"]
            return annotator.next(user), f"item {item_id} {word if status == word else 'stays ' + status}"
        return act

    def toggle_region_at_point(user, item_id, point):
        if item_id is None:
            return annotator.next(user), ""
        region = annotator.region_at_click(user, item_id, point)
        if region is None:
            return annotator.item(user, item_id), "no region under that point"
        return after(annotator.toggle_region)(user, item_id, region)

    toggle_token, toggle_region = after(annotator.toggle_token), after(annotator.toggle_region)
    state = [c["item_id"], c["prelabels"]]
    db = {"concurrency_id": "db", "concurrency_limit": 4, "show_progress": "hidden"}

    def on_token(item_id, show, evt: gr.SelectData, request: gr.Request):
        return run(request, item_id, show, toggle_token, evt.index, words_only=True)

    def on_image(item_id, show, evt: gr.SelectData, request: gr.Request):
        return run(request, item_id, show, toggle_region_at_point, evt.index)

    def on_thumbnail(item_id, show, evt: gr.SelectData, request: gr.Request):
        return run(request, item_id, show, toggle_region, evt.index)

    for component, handler in ((c["tokens"], on_token), (c["image"], on_image), (c["gallery"], on_thumbnail)):
        component.select(handler, state, outputs, trigger_mode="multiple", api_visibility="private", **db)

    def region_key(index: int):
        def on_key(item_id, show, request: gr.Request):
            return run(request, item_id, show, toggle_region, index)
        return on_key

    for number, button in enumerate(c["region_keys"]):
        button.click(region_key(number), state, outputs, trigger_mode="multiple", api_visibility="private", **db)

    # the same actions with explicit indices, as API endpoints (tests call them through gradio_client)
    api_index = gr.Number(visible=False, precision=0)

    def api_toggle_token(item_id, show, index, request: gr.Request):
        return run(request, item_id, show, toggle_token, int(index), words_only=True)

    def api_toggle_region(item_id, show, index, request: gr.Request):
        return run(request, item_id, show, toggle_region, int(index))

    def on_undo(item_id, show, request: gr.Request):
        return run(request, item_id, show, after(annotator.undo))

    def on_submit(item_id, show, request: gr.Request):
        return run(request, item_id, show, finish(annotator.submit, "submitted"))

    def on_skip(item_id, show, request: gr.Request):
        return run(request, item_id, show, finish(annotator.skip, "skipped"))

    def on_next(item_id, show, request: gr.Request):
        return run(request, item_id, show, open_next)

    def on_previous(item_id, show, request: gr.Request):
        return run(request, item_id, show, open_previous)

    def flag_item(user, item_id, kind, comment):
        if item_id is None:
            return annotator.next(user), ""
        annotator.flag(user, item_id, kind, comment or "")
        return annotator.item(user, item_id), f"flagged: {kind.replace('_', ' ')}"

    def on_flag(item_id, show, kind, comment, request: gr.Request):
        return run(request, item_id, show, flag_item, kind, comment)

    def on_reload(item_id, show, request: gr.Request):
        return run(request, item_id, show, current, compute=True)

    def on_suggest(item_id, show, request: gr.Request):
        """After moving to another item: its suggestions, when they are shown and not known yet."""
        if not show or item_id is None or annotator.suggestions.cached(item_id) is not None:
            return tuple(gr.skip() for _ in outputs)
        return on_reload(item_id, show, request)

    gr.Button(visible=False).click(api_toggle_token, [*state, api_index], outputs, api_name="toggle_token", **db)
    gr.Button(visible=False).click(api_toggle_region, [*state, api_index], outputs, api_name="toggle_region", **db)
    c["undo"].click(on_undo, state, outputs, trigger_mode="multiple", api_name="undo", **db)
    c["flag"].click(on_flag, [*state, c["flag_kind"], c["flag_comment"]], outputs, api_name="flag", **db)
    model = {"concurrency_id": "model", "concurrency_limit": 1, "api_visibility": "private"}
    for button, handler, name in ((c["submit"], on_submit, "submit"), (c["skip"], on_skip, "skip"),
                                  (c["next"], on_next, "next"), (c["previous"], on_previous, "previous")):
        button.click(handler, state, outputs, api_name=name, **db).then(on_suggest, state, outputs, **model)
    # suggestions may need the model: they queue with inference, so label saves never wait behind them
    c["prelabels"].change(on_reload, state, outputs, show_progress="minimal", **model)
    c["guidelines_button"].click(lambda: gr.Accordion(open=True), None, c["guidelines"], api_visibility="private",
                                 queue=False)
    c["open"] = (on_next, state, outputs)
