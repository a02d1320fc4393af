"""Annotate's actions, as plain functions. An action applies one step for a
signed-in user and says what to show next:
`action(annotator, user, item_id, *args) -> (item or None, note)`.

A click on the picture does what the mode says. The region being made (its
clicks and mask) and the word picked for a tie live in the page's `draft`
state, tied to its item; nothing of it is stored until "Add region"."""
from __future__ import annotations

import html
from typing import Callable

from capscope.annotation.refusals import AnnotationError
from capscope.annotation.users import UserInfo
from capscope.server.segmenting import SegmentingBusy
from capscope.pictures import draw as ui_draw
from capscope.ui.annotator import Annotator
from capscope.ui.segment_drafts import candidates_note, drafted_candidates, dragged_box, prompt_note


def open_next(annotator: Annotator, user: UserInfo, item_id: int | None):
    return annotator.next(user), ""


def open_previous(annotator: Annotator, user: UserInfo, item_id: int | None):
    earlier = annotator.previous(user, item_id)
    if earlier is not None:
        return earlier, f"item {earlier['item_id']}: submitted earlier; changes are saved to it"
    return current_or_next(annotator, user, item_id), "no earlier submitted item"


def current_item(annotator: Annotator, user: UserInfo, item_id: int | None):
    return current_or_next(annotator, user, item_id), ""


def current_or_next(annotator: Annotator, user: UserInfo, item_id: int | None) -> dict | None:
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


def flag_item(annotator: Annotator, user: UserInfo, item_id: int | None, kind: str, comment: str | None):
    if item_id is None:
        return annotator.next(user), ""
    annotator.flag(user, item_id, kind, comment or "")
    return annotator.item(user, item_id), f"flagged: {kind.replace('_', ' ')}"
