"""A region being made by clicks and a dragged box, as Annotate and Inspect show it: the box a
drag drew (checked as anyone could send it), the segmenter's candidate masks, the line that
says what prompted it, and the draft drawn over the picture."""
from __future__ import annotations

import json
import math

from PIL import Image, ImageDraw

from capscope.annotation.refusals import AnnotationError
from capscope.metrics.regions import rle_to_mask
from capscope.pictures import draw as ui_draw

MAX_BOX_TEXT = 400  # characters of a dragged box's JSON; the page sends fewer than 100


def dragged_box(value, size: tuple[int, int]) -> list[float]:
    """The box a drag on the displayed picture drew (static/hotkeys.js writes
    `{"box": [x0, y0, x1, y1], ...}` in the displayed picture's pixels), in the
    image's pixels: finite numbers only, corners in either order, kept inside
    the image (a drag may end past its edge); AnnotationError for anything else,
    or for a box under one image pixel a side."""
    if not isinstance(value, str) or not value or len(value) > MAX_BOX_TEXT:
        raise AnnotationError("that drag has no box")
    try:
        box = json.loads(value, parse_constant=lambda name: float("nan")).get("box")
    except (ValueError, AttributeError, RecursionError):
        raise AnnotationError("that drag has no box") from None
    if not isinstance(box, list) or len(box) != 4 or \
            not all(type(v) in (int, float) and math.isfinite(v) for v in box):
        raise AnnotationError("a dragged box is four finite numbers")
    scale = ui_draw.display_scale(size)
    xs = sorted(min(max(float(v) / scale, 0.0), float(size[0])) for v in box[0::2])
    ys = sorted(min(max(float(v) / scale, 0.0), float(size[1])) for v in box[1::2])
    if xs[1] - xs[0] < 1 or ys[1] - ys[0] < 1:
        raise AnnotationError("that box is under one pixel a side: drag a larger one")
    return [round(xs[0], 1), round(ys[0], 1), round(xs[1], 1), round(ys[1], 1)]


def prompt_note(draft: dict) -> str:
    """What the region being made was prompted with: "box + 2 clicks"."""
    clicks = len(draft["points"])
    parts = (["box"] if draft.get("box") else []) + ([f"{clicks} click{'s' * (clicks != 1)}"] if clicks else [])
    return " + ".join(parts)


def drafted_candidates(answer: dict) -> dict:
    """The draft's masks from a segment answer: every candidate mask (best first; an
    empty one left out), the shown one (the best) as the draft's mask."""
    found = [{"mask": c["mask"], "score": c.get("score")} for c in answer.get("candidates") or [answer]
             if c.get("box")]
    return {"candidates": found, "shown": 0, "mask": found[0]["mask"] if found else None}


def candidates_note(draft: dict) -> str:
    """" · mask 1 of 3 (0.91) · m: next mask" when the segmenter offered several."""
    found = draft.get("candidates") or []
    if len(found) < 2:
        return ""
    shown = draft.get("shown", 0)
    score = found[shown].get("score")
    scored = f" ({score:.2f})" if isinstance(score, (int, float)) else ""
    return f" · mask {shown + 1} of {len(found)}{scored} · <kbd>m</kbd> next mask"


def drawn_draft(picture: Image.Image, size: tuple[int, int], draft: dict) -> Image.Image:
    """The region being made on a picture drawn by capscope.pictures.draw: its mask,
    its clicks and its box (dashed-looking blue outline)."""
    mask = rle_to_mask(draft["mask"]) if draft.get("mask") else None
    picture = ui_draw.with_draft(picture, size, mask, draft.get("points") or [])
    if draft.get("box"):
        scale = picture.width // max(1, size[0])
        x0, y0, x1, y1 = (v * scale for v in draft["box"])
        draw = ImageDraw.Draw(picture)
        draw.rectangle([x0, y0, x1, y1], outline=(255, 255, 255), width=4)
        draw.rectangle([x0, y0, x1, y1], outline=(29, 111, 216), width=2)
    return picture
