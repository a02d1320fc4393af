"""Regions made on the picture being inspected: Inspect's click-to-segment logic.

A click (Segment +/−) or a dragged box segments the inspected picture through the
server's ClickService, in this process, with the REST route's prompt checks and
per-user limits; "Add region" appends the mask to the inspection's regions (the
proposals or given boxes first, as scored) and both captions are scored again with
them. Nothing is stored: the regions live in the page's state."""
from __future__ import annotations

import functools
import html
import os

from capscope.annotation.refusals import AnnotationError, Invalid
from capscope.common.errors import CapscopeError, first_line
from capscope.server.segmenting import ClickService, SegmentingBusy
from capscope.pictures import draw as ui_draw
from capscope.ui.inspect_scoring import inspect_image, readable_image, shown_metric
from capscope.ui.inspect_views import overlay
from capscope.ui.segment_drafts import candidates_note, drafted_candidates, dragged_box, drawn_draft, prompt_note

# labels of their own: Annotate's "Segment +" and "Segment −" are on the same page
INSPECT_MODES = [("See what matches", "match"), ("Segment: add (+)", "segment+"),
                 ("Segment: take away (−)", "segment-")]
MAX_INSPECT_REGIONS = 100  # the pipeline's most proposals: an inspection never scores more regions


def empty_segment_draft(image: str | None = None) -> dict:
    return {"image": image, "points": [], "box": None, "mask": None, "candidates": [], "shown": 0}


def segment_draft_of(draft: dict | None, image) -> dict:
    """The draft when it was made on this picture (the same file), else an empty one for it."""
    key = None if image is None else str(image)
    if isinstance(draft, dict) and draft.get("image") == key:
        return {**empty_segment_draft(key), **draft}
    return empty_segment_draft(key)


@functools.lru_cache(maxsize=64)
def _picture_key(path: str, _mtime_ns: int, _size: int) -> int:
    """The click service's key for an inspected file: a negative number from its bytes' hash
    (items' images have positive ids), so the same picture shares one embedding."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return -1 - int(digest.hexdigest()[:15], 16)


def segment_inspected(clicks: ClickService, image, points: list, box, user: str | None) -> dict:
    """The segment answer (as POST /api/items/{id}/segment's) for the inspected file:
    prompts checked against its size before any work, the user's limits as on REST."""
    picture = inspect_image(image)
    if picture is None or not isinstance(image, (str, os.PathLike)):
        raise Invalid("open a picture first")
    stat = os.stat(image)
    key = _picture_key(str(image), stat.st_mtime_ns, stat.st_size)
    return clicks.segment(key, str(image), points, box, user=user or "", size=picture.size)


def drafted_overlay(image, row: dict | None, metric: str, draft: dict, selected: int | None = None):
    """`overlay` with the region being made (its mask, clicks and box) over it."""

    picture = readable_image(image)
    shown = overlay(picture, row, shown_metric(row, metric), selected)
    if shown is None or not (draft.get("points") or draft.get("box")):
        return shown
    return drawn_draft(shown, picture.size, draft)


def segment_on_inspected(clicks: ClickService, image, draft: dict | None, user: str | None, *,
                         point=None, positive: bool = True, drag: str | None = None) -> tuple[dict, str]:
    """(new draft, note) for a click (`point`: Gradio's [x, y] on an overlay) or a dragged box (`drag`:
    static/hotkeys.js's JSON) on the inspected picture; the old draft is kept when refused."""

    draft = segment_draft_of(draft, image)
    try:
        picture = inspect_image(image)
        if picture is None:
            return draft, "Open a picture first."
        if drag is not None:
            box, points = dragged_box(drag, picture.size), []
            made = {**empty_segment_draft(draft["image"]), "box": box}
        else:
            if not isinstance(point, (list, tuple)) or len(point) != 2:
                return draft, "That click has no position."
            scale = ui_draw.display_scale(picture.size)
            x = min(max(float(point[0]) / scale, 0.0), picture.width - 0.5)
            y = min(max(float(point[1]) / scale, 0.0), picture.height - 0.5)
            box, points, made = draft["box"], draft["points"] + [[round(x, 1), round(y, 1), int(positive)]], draft
        answer = segment_inspected(clicks, image, points, box, user)
    except (AnnotationError, Invalid, SegmentingBusy, CapscopeError, OSError, ValueError) as err:
        return draft, f"⚠ {html.escape(first_line(err))}"
    made = {**made, "points": points, "box": box, **drafted_candidates(answer)}
    fallback = " (fallback: no SAM weights on this server)" if answer["fallback"] else ""
    return made, (f"{prompt_note(made)} · {html.escape(answer['segmenter'])}{fallback} · {answer['ms']:.0f} ms"
                  f"{masks_note(made)} · **Add region** to score it")


def masks_note(draft: dict) -> str:
    """Annotate's " · mask 2 of 3 (0.60)", with Inspect's button for the next one."""

    note = candidates_note(draft)
    return note.replace("<kbd>m</kbd> next mask", "**Next mask** for another") if note else ""


def next_inspected_mask(draft: dict | None, image) -> tuple[dict, str]:
    """The next of the segmenter's masks for the region being made, round and round."""

    draft = segment_draft_of(draft, image)
    found = draft.get("candidates") or []
    if len(found) < 2:
        return draft, "One mask only: click again to correct it."
    shown = (int(draft.get("shown") or 0) + 1) % len(found)
    draft = {**draft, "shown": shown, "mask": found[shown]["mask"]}
    return draft, f"{prompt_note(draft)}{masks_note(draft)}"


def regions_with(row: dict | None, regions: list | None, mask: dict) -> list[dict]:
    """The inspection's regions (as scored: the row's, with their masks) and one more, a mask (COCO RLE)."""
    from capscope.metrics.regions import mask_to_box, rle_to_mask

    kept = [{"box": r["box"], **({"mask": r["mask"]} if r.get("mask") else {})}
            for r in ((row or {}).get("regions") or regions or [])]
    if len(kept) >= MAX_INSPECT_REGIONS:
        raise Invalid(f"an inspection scores at most {MAX_INSPECT_REGIONS} regions")
    box = [round(float(v), 2) for v in mask_to_box(rle_to_mask(mask))]
    return [*kept, {"box": box, "mask": mask}]
