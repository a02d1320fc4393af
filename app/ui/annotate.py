"""Annotate: the annotator's queue, one click = one saved label.

The database is the source of truth: every handler reads the item and its
labels back from the store (`capscope.annotation.workflow`) and redraws from
that, so a reload, a second tab or a lost response never shows stale labels.
Each click saves inside its own handler and answers with the saved revision.
Handlers taking `gr.SelectData` only unpack the event and call a plain
function that takes the index."""
from __future__ import annotations

import html
import logging
import threading
from datetime import datetime
from typing import Callable

import gradio as gr

from capscope.annotation import added_regions, browse, workflow
from capscope.annotation.refusals import AnnotationError
from capscope.annotation.model_versions import DEFAULT_TAG, is_version_tag
from capscope.annotation.browse import dataset_names
from capscope.annotation.queue import DEMO_DATASET
from capscope.annotation.users import UserInfo, annotate_dataset, get_user, set_annotate_dataset
from capscope.db import Store
from capscope.server.scoring import Models
from capscope.server.segmenting import ClickService, SegmentingBusy
from capscope.server.suggestions import Suggestions, item_picture
from capscope.ui.shared import SCORING_EVENTS
from capscope.pictures import draw as ui_draw
from capscope.ui.segment_drafts import (MAX_BOX_TEXT, candidates_note, drafted_candidates, dragged_box, drawn_draft,
                                        prompt_note)

log = logging.getLogger(__name__)


MAX_REGION_KEYS = 10
ALL_DATASETS = "every dataset (demo last)"  # the picker's choice for no dataset
KEYS_HELP = ("<span class='cs-keys'>Keys: <kbd>1</kbd>–<kbd>9</kbd>, <kbd>0</kbd> region 1–10 · "
             "drag on the picture: a box for the segmenter · "
             "<kbd>m</kbd> the segmenter's next mask · "
             "<kbd>a</kbd> add the region being made · <kbd>Esc</kbd> drop it · "
             "<kbd>s</kbd>/<kbd>Enter</kbd> submit &amp; next · <kbd>k</kbd> skip · "
             "<kbd>u</kbd>/<kbd>z</kbd> undo · "
             "<kbd>n</kbd> next · <kbd>b</kbd> previous (submitted items stay editable) · <kbd>p</kbd> model suggestions · <kbd>g</kbd> guidelines · "
             "<kbd>←</kbd>/<kbd>→</kbd> + <kbd>Enter</kbd> on words</span>")


def guidelines_text() -> str:
    from importlib import resources

    return resources.files("capscope.static").joinpath("guidelines.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------- plain logic

class Annotator:
    """What the Annotate tab does for one user, independent of Gradio."""

    def __init__(self, store: Store, models: Models | None = None, lease_seconds: int = workflow.LEASE_SECONDS,
                 clicks: ClickService | None = None, suggestions: Suggestions | None = None):
        self.store = store
        self.lease = lease_seconds
        self.clicks = clicks or ClickService("auto")
        # the server's (app/server/suggestions.py, shared with the REST API); none without a model
        self.suggestions = suggestions or (Suggestions(store, models) if models is not None else None)
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
        """The next item of the dataset the user chose (every dataset, the demo last, when none)."""
        item = workflow.next_item(self.store, user, dataset=annotate_dataset(self.store, user),
                                  lease_seconds=self.lease)
        if item is not None:
            item["_path"] = workflow.image_path(self.store, user, item["image_id"])
            self.clicks.prefetch(user.name, item["image_id"], item["_path"], dataset=item["dataset"])
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

    def toggle_junk(self, user: UserInfo, item_id: int, index: int) -> dict:
        return workflow.toggle_junk(self.store, user, item_id, index, lease_seconds=self.lease)

    def toggle_link(self, user: UserInfo, item_id: int, token: int, region: int) -> dict:
        return workflow.toggle_link(self.store, user, item_id, token, region, lease_seconds=self.lease)

    def segment(self, user: UserInfo, item_id: int, points: list, box: list | None = None) -> dict:
        image = added_regions.item_image_file(self.store, user, item_id)
        return self.clicks.segment(image.id, image.path, points, box, user=user.name, size=image.size)

    def add_region(self, user: UserInfo, item_id: int, mask: dict, points: list,
                   box: list | None = None) -> tuple[dict, bool]:
        prompts = {"points": [list(p) for p in points], "box": None if box is None else list(box),
                   "segmenter": self.clicks.name}
        return added_regions.add_region(self.store, user, item_id, mask=mask, prompts=prompts)

    def region_at_click(self, user: UserInfo, item_id: int, point) -> int | None:
        item = self.item(user, item_id)
        return ui_draw.clicked_region(ui_draw.shown_boxes(item["regions"]), (item["width"], item["height"]), point)

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
    from capscope.ui.caption_shading import token_segments

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
    text = (f"**Item {item['item_id']}** · `{html.escape(item['id'])}` · dataset {html.escape(item['dataset'])} · "
            f"{sum(not r.get('removed') for r in item['regions'])} regions. "
            "Click wrong words; click the regions the caption mentions.")
    review = item.get("review") or {}
    if review.get("status") == "returned":  # a reviewer sent it back: their comment, then submit again
        text += (f"\n\n<div id='cs-returned'>↩ <b>Sent back by {html.escape(review.get('reviewer') or '')}</b>: "
                 f"“{html.escape(review.get('comment') or '')}” · correct it and submit again.</div>")
    return text


# ---------------------------------------------------------------- Gradio layer

def build_annotate(annotator: Annotator) -> dict:
    c: dict = {}
    with gr.Column(elem_id="cs-annotate"):
        with gr.Row():
            c["dataset"] = gr.Dropdown([ALL_DATASETS], value=ALL_DATASETS, label="Dataset", scale=1,
                                       elem_id="cs-annotate-dataset")
            c["header"] = gr.Markdown("Loading your queue…")
            c["saved"] = gr.Markdown("", elem_id="cs-saved", elem_classes="cs-saved")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3):
                c["image"] = gr.Image(label="Click a region: what it does is the mode below", interactive=False,
                                      buttons=[], height=420, elem_id="cs-annotate-image")
                with gr.Row():
                    c["mode"] = gr.Radio(MODES, value="mark", label="A click on the picture", scale=4,
                                         elem_id="cs-click-mode")
                    c["add_region"] = gr.Button("Add region (a)", size="sm", scale=1, elem_id="cs-add-region")
                    c["drop_region"] = gr.Button("Drop (Esc)", size="sm", scale=1, elem_id="cs-drop-region")
                    c["next_mask"] = gr.Button("Next mask (m)", size="sm", scale=1, elem_id="cs-next-mask")
                c["gallery"] = gr.Gallery(label="Regions (click to toggle)", columns=10, rows=1, height=150,
                                          allow_preview=False, object_fit="contain", interactive=False,
                                          elem_id="cs-gallery")
            with gr.Column(scale=2):
                c["tokens"] = gr.HighlightedText(label="Caption · click a word to mark it incorrect",
                                                 interactive=False, elem_id="cs-annotate-tokens",
                                                 elem_classes="cs-tokens")
                c["suggested"] = gr.Markdown("", visible=True, elem_id="cs-suggested")
                c["ties"] = gr.HTML("", elem_id="cs-ties")
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
            c["box"] = gr.Textbox("", max_length=MAX_BOX_TEXT, elem_id="cs-annotate-box")  # a drag's box (hotkeys.js)
    c["item_id"] = gr.State(None)  # which item is on screen; its labels always come from the store
    c["draft"] = gr.State(empty_draft())  # the region being made and the word picked for ties
    _wire_annotate(annotator, c)
    return c


# ---------------------------------------------------------------- actions
# An action applies one step for a signed-in user and says what to show next:
# `action(annotator, user, item_id, *args) -> (item or None, note)`.

def open_next(annotator: Annotator, user: UserInfo, item_id: int | None):
    return annotator.next(user), ""


def open_previous(annotator: Annotator, user: UserInfo, item_id: int | None):
    earlier = annotator.previous(user, item_id)
    if earlier is not None:
        return earlier, f"item {earlier['item_id']}: submitted earlier; changes are saved to it"
    return _current_or_next(annotator, user, item_id), "no earlier submitted item"


def current_item(annotator: Annotator, user: UserInfo, item_id: int | None):
    return _current_or_next(annotator, user, item_id), ""


def _current_or_next(annotator: Annotator, user: UserInfo, item_id: int | None) -> dict | None:
    return annotator.item(user, item_id) if item_id else annotator.next(user)


def change_labels(annotator: Annotator, user: UserInfo, item_id: int | None, change: Callable, *args):
    """`change(user, item_id, *args)` saves labels; the item is shown with what was saved."""
    if item_id is None:
        return annotator.next(user), ""
    labels = change(user, item_id, *args)
    item = annotator.item(user, item_id)
    item["labels"] = labels
    taken_back = labels.get("region_taken_back")  # an undo right after "Add region"
    return item, "" if taken_back is None else f"region {taken_back + 1} taken back"


def finish_item(annotator: Annotator, user: UserInfo, item_id: int | None, step: Callable, word: str):
    """Submit or skip (`step`), then the next item; the note says what became of this one."""
    if item_id is None:
        return annotator.next(user), ""
    status = step(user, item_id)["status"]
    return annotator.next(user), f"item {item_id} {word if status == word else 'stays ' + status}"


# ---------------------------------------------------------------- regions the annotator makes, junk, ties
# A click on the picture does what the mode says. The region being made (its
# clicks and mask) and the word picked for a tie live in the page's `draft`
# state, tied to its item; nothing of it is stored until "Add region".

MODES = [("Mark mentioned", "mark"), ("Segment +", "segment+"), ("Segment −", "segment-"),
         ("Junk (no object)", "junk"), ("Tie word → regions", "tie")]


def empty_draft(item_id: int | None = None) -> dict:
    return {"item": item_id, "points": [], "box": None, "mask": None, "word": None, "candidates": [], "shown": 0}


def draft_of(draft: dict | None, item_id: int | None) -> dict:
    """The draft when it belongs to this item, else an empty one for it."""
    if isinstance(draft, dict) and draft.get("item") == item_id:
        return {**empty_draft(item_id), **draft}
    return empty_draft(item_id)


def with_draft(item: dict | None, draft: dict) -> dict | None:
    if item is not None and draft.get("item") == item["item_id"]:
        item["_draft"] = draft
    return item


def click_picture(annotator: Annotator, user: UserInfo, item_id: int | None, point, mode: str, draft: dict | None):
    if item_id is None:
        return annotator.next(user), ""
    draft = draft_of(draft, item_id)
    if mode in ("segment+", "segment-"):
        return segment_click(annotator, user, item_id, point, mode == "segment+", draft)
    region = annotator.region_at_click(user, item_id, point)
    if region is None:
        return with_draft(annotator.item(user, item_id), draft), \
            "no region under that point (Segment + makes one)"
    return act_on_region(annotator, user, item_id, region, mode, draft)


def act_on_region(annotator: Annotator, user: UserInfo, item_id: int, region: int, mode: str, draft: dict):
    if mode == "junk":
        item, note = change_labels(annotator, user, item_id, annotator.toggle_junk, region)
    elif mode == "tie":
        if draft["word"] is None:
            return with_draft(annotator.item(user, item_id), draft), "pick a word first, then its regions"
        item, note = change_labels(annotator, user, item_id, annotator.toggle_link, draft["word"], region)
    else:
        item, note = change_labels(annotator, user, item_id, annotator.toggle_region, region)
    return with_draft(item, draft), note


def picture_point(item: dict, point) -> tuple[float, float]:
    """Gradio's [x, y] on the displayed picture, in the image's pixels (kept inside it)."""
    if not isinstance(point, (list, tuple)) or len(point) != 2:
        raise AnnotationError("that click has no position")
    scale = ui_draw.display_scale((item["width"], item["height"]))
    x = min(max(float(point[0]) / scale, 0.0), item["width"] - 0.5)
    y = min(max(float(point[1]) / scale, 0.0), item["height"] - 0.5)
    return round(x, 1), round(y, 1)


def segment_draft(annotator: Annotator, user: UserInfo, item: dict, draft: dict, points: list, box):
    """The draft segmented again with these prompts (the old draft kept when the segmenter is busy)."""
    try:
        answer = annotator.segment(user, item["item_id"], points, box)
    except SegmentingBusy as err:
        return with_draft(item, draft), f"⚠ {html.escape(str(err))}"
    draft = {**draft, "points": points, "box": box, **drafted_candidates(answer)}
    fallback = " (fallback: no SAM weights on this server)" if answer["fallback"] else ""
    return with_draft(item, draft), (f"{prompt_note(draft)} · {html.escape(answer['segmenter'])}"
                                     f"{fallback} · {answer['ms']:.0f} ms{candidates_note(draft)} · "
                                     "<kbd>a</kbd> add region, <kbd>Esc</kbd> drop")


def next_mask(annotator: Annotator, user: UserInfo, item_id: int | None, draft: dict | None):
    """The next of the segmenter's masks for the region being made (the key m), round and round."""
    if item_id is None:
        return annotator.next(user), ""
    draft = draft_of(draft, item_id)
    found = draft.get("candidates") or []
    item = annotator.item(user, item_id)
    if len(found) < 2:
        return with_draft(item, draft), "one mask only: click again to correct it"
    shown = (int(draft.get("shown") or 0) + 1) % len(found)
    draft = {**draft, "shown": shown, "mask": found[shown]["mask"]}
    return with_draft(item, draft), f"{prompt_note(draft)}{candidates_note(draft)}".lstrip(" ·")


def segment_click(annotator: Annotator, user: UserInfo, item_id: int, point, positive: bool, draft: dict):
    item = annotator.item(user, item_id)
    x, y = picture_point(item, point)
    return segment_draft(annotator, user, item, draft, draft["points"] + [[x, y, int(positive)]], draft["box"])


def drag_on_picture(annotator: Annotator, user: UserInfo, item_id: int | None, value, draft: dict | None):
    """A box dragged on the picture: a new region being made, prompted by the box
    (later clicks in Segment +/− refine it with the box)."""
    if item_id is None:
        return annotator.next(user), ""
    item = annotator.item(user, item_id)
    kept = {**empty_draft(item_id), "word": draft_of(draft, item_id)["word"]}
    box = dragged_box(value, (item["width"], item["height"]))
    return segment_draft(annotator, user, item, kept, [], box)


def add_draft(annotator: Annotator, user: UserInfo, item_id: int | None, draft: dict | None):
    if item_id is None:
        return annotator.next(user), ""
    draft = draft_of(draft, item_id)
    if draft["mask"] is None:
        return with_draft(annotator.item(user, item_id), draft), "nothing to add: click the object in Segment + first"
    region, added = annotator.add_region(user, item_id, draft["mask"], draft["points"], draft.get("box"))
    item = with_draft(annotator.item(user, item_id), {**empty_draft(item_id), "word": draft["word"]})
    number = region["index"] + 1
    return item, (f"region {number} added" if added else f"that is region {number} already (IoU ≥ 0.9): nothing added")


def drop_draft(annotator: Annotator, user: UserInfo, item_id: int | None, draft: dict | None):
    if item_id is None:
        return annotator.next(user), ""
    kept = {**empty_draft(item_id), "word": draft_of(draft, item_id)["word"]}
    return with_draft(annotator.item(user, item_id), kept), "the region being made was dropped"


def pick_word(annotator: Annotator, user: UserInfo, item_id: int | None, index: int, draft: dict | None):
    """Tie mode: the word whose regions the next clicks tie."""
    if item_id is None:
        return annotator.next(user), ""
    item = annotator.item(user, item_id)
    if not 0 <= index < len(item["tokens"]):
        raise AnnotationError(f"token index {index} is out of range")
    draft = {**draft_of(draft, item_id), "word": index}
    word = html.escape(item["tokens"][index]["text"])
    return with_draft(item, draft), f"“{word}” picked: click the regions it speaks of"


def ties_text(item: dict) -> str:
    """The item's ties as a line: “word” → region numbers."""
    links = (item.get("labels") or {}).get("links") or []
    if not links:
        return "<small>No words tied to regions yet (mode “Tie word → regions”: a word, then its regions).</small>"
    by_word: dict[int, list[int]] = {}
    for token, region in links:
        by_word.setdefault(token, []).append(region + 1)
    shown = " · ".join(f"“{html.escape(item['tokens'][t]['text'])}” → {', '.join(map(str, sorted(r)))}"
                       for t, r in sorted(by_word.items()))
    return f"<small>Ties: {shown}</small>"


def flag_item(annotator: Annotator, user: UserInfo, item_id: int | None, kind: str, comment: str | None):
    if item_id is None:
        return annotator.next(user), ""
    annotator.flag(user, item_id, kind, comment or "")
    return annotator.item(user, item_id), f"flagged: {kind.replace('_', ' ')}"


# ---------------------------------------------------------------- drawing the tab

def render(annotator: Annotator, user: UserInfo, item: dict | None, note: str = "", show_suggestions: bool = False,
           compute: bool = False, words_only: bool = False) -> tuple:
    """Every output; with `words_only` (a word toggled on the same item) the
    picture, thumbnails and header are left as they are, which keeps clicks quick."""
    progress = progress_html(annotator.progress(user))
    if item is None:
        return (None, "**Nothing left in your queue.** Thank you!", None, [], [], note, progress, "", "",
                empty_draft())
    # label clicks never run the model: only the suggestions handler (model queue) computes
    suggestion = annotator.suggestions.get(user, item, compute) \
        if show_suggestions and annotator.suggestions is not None else None
    wrong, mentioned = (suggestion[0], suggestion[1]) if suggestion else (None, None)
    if words_only:
        picture = (gr.skip(), gr.skip(), gr.skip())
    else:
        picture = _picture(item, mentioned)
    hint = suggestions_hint(suggestion, compute) if show_suggestions else ""
    return (item["item_id"], *picture, token_values(item, wrong), saved_text(item.get("labels"), note),
            progress, hint, ties_text(item), item.get("_draft", gr.skip()))


def _picture(item: dict, suggested_regions: set[int] | None) -> tuple:
    """(header, image with the chosen and suggested regions, thumbnails)."""
    image = item_picture(item["_path"])
    boxes = ui_draw.shown_boxes(item["regions"])  # None for a region taken away
    labels = item.get("labels") or {}
    chosen, junk = set(labels.get("mentioned_regions", ())), set(labels.get("junk_regions", ()))
    picture = ui_draw.labels_overlay(image, boxes, chosen, suggested_regions, junk,
                                     masks=ui_draw.shown_masks(item["regions"]))  # a saved mask shows as drawn
    draft = item.get("_draft") or {}
    if draft.get("points") or draft.get("box"):
        picture = drawn_draft(picture, image.size, draft)
    return item_header(item), picture, ui_draw.thumbnails(image, boxes, chosen)


def suggestion_source(version: str | None) -> str:
    """Who made a suggestion: a model version by its tag, the server's default
    model (None), or predictions imported from a file (any other tag)."""
    if version is None or version == DEFAULT_TAG:
        return "the server's default model"
    if is_version_tag(version):
        return f"model version **{version}**"
    return "imported predictions"


def suggestions_hint(suggestion: tuple | None, computed: bool) -> str:
    """The line under the caption; it says which model version made the suggestions."""
    if suggestion:
        return (f"Model suggestions from {suggestion_source(suggestion[3])} ({suggestion[2]}): "
                "faint red words, dashed boxes.")
    return "No model suggestions for this item." if computed else "Model suggestions are being computed…"


def run(annotator: Annotator, request: gr.Request | None, item_id: int | None, show: bool, action: Callable,
        *args, compute: bool = False, words_only: bool = False) -> tuple:
    """`action` for the request's user, drawn; workflow errors go to the status line."""
    try:
        user = annotator.user(request.username if request else None)
    except AnnotationError as err:
        return (None, f"**{html.escape(str(err))}**", None, [], [], "", "", "", "", gr.skip())
    with annotator.lock_for(user):  # one user's clicks are applied and drawn in order
        try:
            item, note = action(annotator, user, item_id, *args)
        except AnnotationError as err:
            item = _current_or_next(annotator, user, item_id)
            note = f"⚠ not saved: {html.escape(str(err))}"
        same_item = item is not None and item["item_id"] == item_id
        return render(annotator, user, item, note, show, compute, words_only and same_item)


# ---------------------------------------------------------------- handlers

class AnnotateHandlers:
    """The tab's event handlers. Each takes the on-screen state (the item's id,
    whether suggestions are shown), the event's own values and the request, and
    returns every output. Methods rather than closures: Gradio reads their
    `gr.Request` / `gr.SelectData` annotations; handlers taking `gr.SelectData`
    only unpack the event."""

    def __init__(self, annotator: Annotator):
        self.annotator = annotator

    def _run(self, request, item_id, show, action, *args, **options) -> tuple:
        return run(self.annotator, request, item_id, show, action, *args, **options)

    def toggle_token(self, item_id, show, index, request: gr.Request):
        return self._run(request, item_id, show, change_labels, self.annotator.toggle_token, int(index),
                         words_only=True)

    def toggle_region(self, item_id, show, index, request: gr.Request):
        return self._run(request, item_id, show, change_labels, self.annotator.toggle_region, int(index))

    def on_word(self, item_id, show, mode, draft, evt: gr.SelectData, request: gr.Request):
        if mode == "tie":
            return self._run(request, item_id, show, pick_word, int(evt.index), draft, words_only=True)
        return self.toggle_token(item_id, show, evt.index, request)

    def on_image(self, item_id, show, mode, draft, evt: gr.SelectData, request: gr.Request):
        return self._run(request, item_id, show, click_picture, evt.index, mode, draft)

    def on_drag(self, item_id, show, mode, draft, value, request: gr.Request):
        """A box dragged on the picture; the mode turns to Segment + so that the next clicks refine it."""
        shown = self._run(request, item_id, show, drag_on_picture, value, draft)
        made = isinstance(shown[-1], dict) and shown[-1].get("box")
        return *shown, ("segment+" if made and mode not in ("segment+", "segment-") else gr.skip())

    def on_thumbnail(self, item_id, show, mode, draft, evt: gr.SelectData, request: gr.Request):
        def act(annotator, user, item_id, index):
            if item_id is None:
                return annotator.next(user), ""
            return act_on_region(annotator, user, item_id, index, mode, draft_of(draft, item_id))
        return self._run(request, item_id, show, act, int(evt.index))

    def add_region(self, item_id, show, draft, request: gr.Request):
        return self._run(request, item_id, show, add_draft, draft)

    def next_mask(self, item_id, show, draft, request: gr.Request):
        return self._run(request, item_id, show, next_mask, draft)

    def drop_region(self, item_id, show, draft, request: gr.Request):
        return self._run(request, item_id, show, drop_draft, draft)

    def on_region_key(self, key: str, item_id, show, request: gr.Request):
        """A region's number button (its label is "1" to "10")."""
        return self.toggle_region(item_id, show, int(key) - 1, request)

    def undo(self, item_id, show, request: gr.Request):
        return self._run(request, item_id, show, change_labels, self.annotator.undo)

    def submit(self, item_id, show, request: gr.Request):
        return self._run(request, item_id, show, finish_item, self.annotator.submit, "submitted")

    def skip(self, item_id, show, request: gr.Request):
        return self._run(request, item_id, show, finish_item, self.annotator.skip, "skipped")

    def next(self, item_id, show, request: gr.Request):
        return self._run(request, item_id, show, open_next)

    def previous(self, item_id, show, request: gr.Request):
        return self._run(request, item_id, show, open_previous)

    def choose_dataset(self, item_id, show, dataset, request: gr.Request):
        """The picker: remember the user's dataset and go on with its next item."""
        def choose(annotator, user, item_id):
            set_annotate_dataset(annotator.store, user, None if dataset in (None, "", ALL_DATASETS) else dataset)
            return annotator.next(user), ""
        return self._run(request, item_id, show, choose)

    def datasets(self, request: gr.Request):
        """The picker's choices and the user's remembered one, on page load."""
        user = self.annotator.user(getattr(request, "username", None))
        chosen = annotate_dataset(self.annotator.store, user)
        names = dataset_names(self.annotator.store)
        ordered = [n for n in names if n != DEMO_DATASET] + [n for n in names if n == DEMO_DATASET]
        return gr.update(choices=[ALL_DATASETS, *ordered], value=chosen or ALL_DATASETS)

    def flag(self, item_id, show, kind, comment, request: gr.Request):
        return self._run(request, item_id, show, flag_item, kind, comment)

    def reload(self, item_id, show, request: gr.Request):
        """The item again, computing its model suggestions when they are shown."""
        return self._run(request, item_id, show, current_item, compute=True)

    def suggest(self, item_id, show, request: gr.Request):
        """After moving to another item: its suggestions, when they are shown and not known yet."""
        suggestions = self.annotator.suggestions
        if not show or item_id is None or suggestions is None or suggestions.cached(item_id) is not None:
            return tuple(gr.skip() for _ in OUTPUTS)
        return self.reload(item_id, show, request)


# ---------------------------------------------------------------- wiring

# what every handler returns, in this order
OUTPUTS = ("item_id", "header", "image", "gallery", "tokens", "saved", "progress", "suggested", "ties", "draft")
DB_QUEUE = {"concurrency_id": "db", "concurrency_limit": 4, "show_progress": "hidden"}
MODEL_EVENTS = {**SCORING_EVENTS, "api_visibility": "private"}
CLICKS = {"trigger_mode": "multiple", "api_visibility": "private", **DB_QUEUE}


def _wire_annotate(annotator: Annotator, c: dict) -> None:
    """Connect the components to the handlers; label saves run in the "db"
    queue, anything that may run the model in the "model" queue."""
    handlers = AnnotateHandlers(annotator)
    outputs = [c[name] for name in OUTPUTS]
    state = [c["item_id"], c["prelabels"]]
    clicked = [*state, c["mode"], c["draft"]]
    c["tokens"].select(handlers.on_word, clicked, outputs, **CLICKS)
    c["image"].select(handlers.on_image, clicked, outputs, **CLICKS)
    # static/hotkeys.js writes a drag's box (with a count, so each drag is a change) into the hidden field
    c["box"].change(handlers.on_drag, [*clicked, c["box"]], [*outputs, c["mode"]], **CLICKS)
    c["gallery"].select(handlers.on_thumbnail, clicked, outputs, **CLICKS)
    c["add_region"].click(handlers.add_region, [*state, c["draft"]], outputs, api_name="add_region", **DB_QUEUE)
    c["next_mask"].click(handlers.next_mask, [*state, c["draft"]], outputs, trigger_mode="multiple",
                         api_visibility="private", **DB_QUEUE)
    c["drop_region"].click(handlers.drop_region, [*state, c["draft"]], outputs, api_visibility="private",
                           **DB_QUEUE)
    for button in c["region_keys"]:
        button.click(handlers.on_region_key, [button, *state], outputs, **CLICKS)
    _wire_api(handlers, state, outputs)
    c["undo"].click(handlers.undo, state, outputs, trigger_mode="multiple", api_name="undo", **DB_QUEUE)
    c["flag"].click(handlers.flag, [*state, c["flag_kind"], c["flag_comment"]], outputs, api_name="flag", **DB_QUEUE)
    for name in ("submit", "skip", "next", "previous"):
        c[name].click(getattr(handlers, name), state, outputs, api_name=name, **DB_QUEUE) \
            .then(handlers.suggest, state, outputs, **MODEL_EVENTS)
    # suggestions may need the model: they queue with inference, so label saves never wait behind them
    c["prelabels"].change(handlers.reload, state, outputs, show_progress="minimal", **MODEL_EVENTS)
    c["guidelines_button"].click(lambda: gr.Accordion(open=True), None, c["guidelines"], api_visibility="private",
                                 queue=False)
    c["dataset"].input(handlers.choose_dataset, [*state, c["dataset"]], outputs, api_visibility="private",
                       **DB_QUEUE).then(handlers.suggest, state, outputs, **MODEL_EVENTS)
    c["open"] = (handlers.next, state, outputs)
    c["load"] = [(handlers.datasets, None, c["dataset"])]


def _wire_api(handlers: AnnotateHandlers, state: list, outputs: list) -> None:
    """The click actions with explicit indices, as API endpoints (for gradio_client)."""
    index = gr.Number(visible=False, precision=0)
    gr.Button(visible=False).click(handlers.toggle_token, [*state, index], outputs, api_name="toggle_token",
                                   **DB_QUEUE)
    gr.Button(visible=False).click(handlers.toggle_region, [*state, index], outputs, api_name="toggle_region",
                                   **DB_QUEUE)
