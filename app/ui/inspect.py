"""Inspect: one image, one or two captions, every metric's verdict drawn on them.

Plain functions turn a scorer row (docs/formats.md §2) into what the components
show; `build_inspect` wires them. Scoring goes through `Models`, whose scorer
caches the image side, so an edited caption costs only its text, in the
signed-in user's turn. The image travels as a file: Gradio hands the handlers
the uploaded (or picked) file itself, which capscope decodes under its own
limits, so every path into Inspect scores the file's own pixels, never a
re-encoded copy."""
from __future__ import annotations

import functools
import html
import logging
import math
import os
import threading
from collections import OrderedDict
from typing import Callable

import gradio as gr
from PIL import Image

from capscope.annotation.refusals import AnnotationError, Invalid
from capscope.common.errors import CapscopeError, first_line
from capscope.metrics.images import read_image
from capscope.metrics.registry import SPECS, key_note, metric_names, metric_title
from capscope.server.scoring import Models, ScoringBusy
from capscope.server.segmenting import ClickService, SegmentingBusy
from capscope.pictures import draw as ui_draw
from capscope.ui.caption_shading import SHADE_LEGEND, shaded_tokens, token_metrics, wrong_words
from capscope.ui.segment_drafts import (MAX_BOX_TEXT, candidates_note, drafted_candidates, dragged_box, drawn_draft,
                                        prompt_note)
from capscope.ui.shared import SCORING_EVENTS, scratch_copy

DEMO_BANNER = ("⚠ **Demo model in use.** Pretrained weights cannot be had here, so capscope scores with its "
               "bundled demo model, which knows coloured shapes on plain backgrounds, not photos. "
               "See `capscope models` for what is missing.")

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- row -> display

def region_boxes(row: dict | None) -> list:
    return [r["box"] for r in (row or {}).get("regions", [])]


def overlay(image: Image.Image | None, row: dict | None, metric: str, selected: int | None = None):
    if image is None:
        return None
    result = (row or {}).get("metrics", {}).get(metric) or {}
    scores = result.get("region_scores") or None
    mentioned = result.get("region_mentioned") or None
    masks = [r.get("mask") for r in (row or {}).get("regions", [])]  # a given region's mask: outlined as it is
    return ui_draw.score_overlay(image, region_boxes(row), scores, mentioned, selected, masks=masks)


def fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary_markdown(row: dict | None, metric: str) -> str:
    if not row:
        return ""
    if row.get("error") and not row.get("metrics"):
        return f"**Cannot score:** {row['error']}"
    result = row["metrics"].get(metric) or {}
    parts = []
    wrong = wrong_words(row, metric)
    if metric in token_metrics():
        scaled = SPECS[metric].follows_token_rule and (row.get("model") or {}).get("token_rule") == "relative"
        rule = " (β scaled to the caption's length)" if scaled else ""
        parts.append(f"**Wrong words{rule}:** " + (", ".join(f"~~{w}~~" for w in wrong) if wrong else "none found"))
    mentioned = result.get("region_mentioned") or []
    if mentioned:
        missing = [str(i + 1) for i, m in enumerate(mentioned) if not m]
        parts.append(f"**Regions left out:** {', '.join(missing) if missing else 'none'} of {len(mentioned)}")
    if result.get("null_score") is not None:
        parts.append(f"**Null token:** {result['null_score']:.3f}")
    parts += reading_notes(row["caption"], result)
    return " · ".join(parts)


def reading_notes(caption: str, result: dict) -> list[str]:
    """How the metric read a long caption: in how many windows, or where it stopped."""
    windows = result.get("windows") or []
    notes = []
    if len(windows) > 1:
        notes.append(f"**Read in {len(windows)} windows** (longer than the model reads at once)")
    if result.get("truncated") and windows:
        notes.append(f"**Cut:** words after “{html.escape(caption[max(0, windows[-1][1] - 20):windows[-1][1]])}” "
                     "were not read")
    return notes


def phrases_markdown(row: dict | None) -> str:
    phrases = ((row or {}).get("metrics", {}).get("hice") or {}).get("phrases") or []
    if not phrases:
        return ""
    lines = ["| HICE-S phrase | score | |", "|---|---:|---|"]
    for phrase in phrases:
        mark = "✓" if phrase.get("correct") else "✗"
        lines.append(f"| {html.escape(phrase['text'])} | {phrase['score']:.3f} | {mark} |")
    return "\n".join(lines)


def scores_rows(row_a: dict | None, row_b: dict | None) -> list[list]:
    """Global scores of both captions side by side: [metric, key, A, B, range,
    which way is better, what it is] (the last three as the registry says)."""
    keys: dict[tuple[str, str], None] = {}
    for row in (row_a, row_b):
        for name, result in ((row or {}).get("metrics") or {}).items():
            for key in result.get("scores", {}):
                keys[(name, key)] = None

    def value(row, name, key):
        score = ((row or {}).get("metrics", {}).get(name) or {}).get("scores", {}).get(key)
        return None if score is None else round(float(score), 4)

    def note(name, key):  # what the number is, from the registry: [range, which way is better, meaning]
        found = key_note(name, key)
        return [found.range, f"{found.better} is better", found.meaning] if found else ["", "", ""]

    return [[metric_title(n), k, value(row_a, n, k), value(row_b, n, k), *note(n, k)] for n, k in keys]


def region_report(row: dict | None, metric: str, region: int | None, matches: list[tuple[str, float]]) -> str:
    if row is None or region is None:
        return "Click inside a region to see what in the caption matches it."
    result = row["metrics"].get(metric) or {}
    scores, mentioned = result.get("region_scores") or [], result.get("region_mentioned") or []
    text = f"**Region {region + 1}**"
    if region < len(scores):
        state = "mentioned" if region < len(mentioned) and mentioned[region] else "**not mentioned**"
        text += f" · {metric_title(metric)} score {scores[region]:.3f} ({state})"
    if matches:
        best, cos = matches[0]
        text += f" · best match: **{html.escape(best)}** (cosine {cos:.3f})"
        if len(matches) > 1:
            text += " · then " + ", ".join(f"{html.escape(t)} {c:.2f}" for t, c in matches[1:4])
    return text


def parse_references(text: str | None) -> list[str] | None:
    refs = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return refs or None


# ---------------------------------------------------------------- handlers' logic

def inspect_image(value):
    """The image a handler was given (a file path from the Image component, or
    an image already decoded) as RGB pixels, read under capscope's limits;
    None for no image. ImageError (one line) for a file that cannot be read."""
    if value is None or not isinstance(value, (str, os.PathLike)):
        return None if value is None else read_image(value)
    stat = os.stat(value)
    return _decoded(str(value), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _decoded(path: str, _mtime_ns: int, _size: int):
    """A file decoded once for the several handlers one upload fires (keyed by its time and size too)."""
    return read_image(path, name=os.path.basename(path))


def readable_image(value):
    """`inspect_image`, or None for a file that cannot be read (the scorer's row then says why)."""
    try:
        return inspect_image(value)
    except (CapscopeError, OSError):
        return None


def take_image(value) -> tuple:
    """(decoded image or None, what to say beside the picture) for a picture just
    uploaded or picked: a file that cannot be read is said at once, in one line,
    and logged once at WARNING (no traceback: it is the file's fault, not the server's)."""
    try:
        return inspect_image(value), ""
    except (CapscopeError, OSError) as err:
        reason = first_line(err)
        log.warning("Inspect: an uploaded picture cannot be read: %s", reason)
        return None, f"⚠ **This picture cannot be read**, so it cannot be scored: {html.escape(reason)}"


def user_of(request) -> str | None:
    """The signed-in user a Gradio request comes from (scoring turns are taken per user)."""
    return getattr(request, "username", None)


def score_caption(models: Models, image, caption: str, references: str, regions: list | None,
                  metrics: list[str] | None = None, user: str | None = None) -> dict | None:
    """A scorer row (by `metrics`, default every loaded one), or a row-shaped
    error; None when there is nothing to score."""
    if image is None or not (caption or "").strip():
        return None
    try:
        image = inspect_image(image)
        return with_given_masks(models.score(image, caption, parse_references(references), regions=regions,
                                             metrics=metrics, user=user), regions)
    except Exception as err:  # a bad image or caption, a busy server, no model: said on the page, the app stays up
        if not isinstance(err, (CapscopeError, ValueError)):  # not the input's fault: the log keeps the trace
            log.exception("Inspect could not score a caption")
        return {"caption": caption, "tokens": [], "regions": [], "metrics": {}, "error": first_line(err)}


def with_given_masks(row: dict, regions: list | None) -> dict:
    """`row` with each given region's mask (COCO RLE) beside its box, for the
    overlay to outline; the scorer's row keeps boxes only (docs/formats.md §2)."""
    given = [r.get("mask") if isinstance(r, dict) else None for r in regions or []]
    shown = row.get("regions") or []
    if any(given) and len(given) == len(shown):
        row = {**row, "regions": [{**r, "mask": m} if m else r for r, m in zip(shown, given)]}
    return row


def score_rest(models: Models, image, caption: str, references: str, regions: list | None,
               first: dict | None, user: str | None = None) -> dict | None:
    """The whole row, given `first`: the same pair already scored by some of the
    metrics (a keystroke's words-first row), which are not computed again."""
    done = set(((first or {}).get("metrics") or {}))
    if not done or first.get("caption") != caption:
        return score_caption(models, image, caption, references, regions, user=user)
    rest = [m for m in models.available if m not in done]
    if not rest:
        return first
    row = score_caption(models, image, caption, references, regions, rest, user=user)
    if row is None or (row.get("error") and not row.get("metrics")):
        return row
    return {**row, "metrics": {**first["metrics"], **row["metrics"]}}


def words_first(models: Models, image, caption: str, references: str, regions: list | None, metric: str,
                user: str | None = None):
    """A keystroke's first answer: the row by the shown metric alone (a fifth of
    the time of every metric) and its shaded words. When the user already has
    their share of scorings waiting, the words keep their shading until the
    scoring once typing pauses shades them (or says why it could not)."""
    shown = metric if metric in models.available else None
    try:
        models.gate.admissible(user or "")
    except ScoringBusy:
        return gr.skip(), gr.skip()
    row = score_caption(models, image, caption, references, regions, [shown] if shown else None, user=user)
    return row, shaded_tokens(row, shown_metric(row, metric))


def shown_metric(row: dict | None, metric: str | None) -> str | None:
    """The asked metric when the row has it, else its first token-level one."""
    present = list(((row or {}).get("metrics") or {}))
    if metric in present or not present:
        return metric
    return next((m for m in token_metrics() if m in present), present[0])


def caption_view(image, row: dict | None, metric: str) -> tuple:
    """(overlay, shaded tokens, summary, phrases) for one caption column."""
    metric = shown_metric(row, metric)
    return overlay(readable_image(image), row, metric), shaded_tokens(row, metric), summary_markdown(row, metric), \
        phrases_markdown(row)


def column_view(side: str, image, row: dict | None, other_row: dict | None, metric: str) -> tuple:
    """What scoring caption `side` ("a" or "b") into `row` shows: the row, its
    column (`caption_view`) and the table of both captions."""
    pair = (row, other_row) if side == "a" else (other_row, row)
    return row, *caption_view(image, row, metric), scores_rows(*pair)


def click_report(models: Models, image, row: dict | None, metric: str, point, user: str | None = None) -> tuple:
    """(overlay with the region selected, report) for a click at `point` = [x, y]."""
    image = readable_image(image)
    if image is None or not row:
        return gr.skip(), region_report(None, metric, None, [])
    metric = shown_metric(row, metric)
    region = ui_draw.clicked_region(region_boxes(row), image.size, point)
    if region is None:
        return overlay(image, row, metric), "No region under that point."
    matching = metric if metric in row["metrics"] and hasattr(models.scorer.metrics.get(metric), "backbone") \
        else next(iter(row["metrics"]), metric)
    try:
        matches = models.region_matches(image, row, region, matching, user=user) if row["metrics"] else []
    except CapscopeError as err:  # the scorer is busy for this user
        return overlay(image, row, metric, region), f"**Region {region + 1}:** {html.escape(first_line(err))}"
    return overlay(image, row, metric, region), region_report(row, metric, region, matches)


# ---------------------------------------------------------------- regions made on the picture being inspected
# A click (Segment +/−) or a dragged box segments the inspected picture through the
# server's ClickService, in this process, with the REST route's prompt checks and
# per-user limits; "Add region" appends the mask to the inspection's regions (the
# proposals or given boxes first, as scored) and both captions are scored again with
# them. Nothing is stored: the regions live in the page's state.

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


def inspect_ties(store, example: dict | None) -> str:
    """The words annotators tied to the regions of a demo scene that is an item of the store:
    “word” → region numbers (votes of those who saw the region); "" when it has none."""
    if store is None or not example:
        return ""
    from sqlalchemy import select

    from capscope.annotation.queue import DEMO_DATASET
    from capscope.annotation.votes import load_item, without_removed
    from capscope.db import Caption, Dataset

    try:
        with store.read() as session:
            caption_id = session.scalar(select(Caption.id).join(Dataset, Caption.dataset_id == Dataset.id).where(
                Dataset.name == DEMO_DATASET, Caption.external_id == str(example.get("id"))).limit(1))
        item = load_item(store, caption_id) if caption_id is not None else None
        if item is None or item.text != example.get("caption"):
            return ""
        item = without_removed(item)
        shown = len(example.get("regions") or [])
        links = [link for link in item.link_votes() if link["region"] < shown and link["votes"]]
    except Exception as err:  # noqa: BLE001 - ties are a help; Inspect works without them
        log.warning("Inspect: ties not read: %s", first_line(err))
        return ""
    if not links:
        return ""
    words = " · ".join(f"“{html.escape(item.tokens[link['token']]['text'])}” → region {link['region'] + 1} "
                       f"({link['votes']} of {link['total']})" for link in links if link["token"] < len(item.tokens))
    return f"**Words tied to regions** by annotators (caption A): {words}"


def banner(models: Models) -> tuple:
    """(banner update, metric radio update) once the models are loaded."""
    try:
        available = models.available
    except Exception as err:  # nothing loads: annotation still works, scoring cannot
        text = f"⚠ **No scoring model can be loaded here**, so Inspect cannot score: {html.escape(str(err))}"
        return gr.update(value=text, visible=True), gr.skip()
    missing = ", ".join(metric_title(k) for k in models.unavailable)  # reasons are in the server log
    text = DEMO_BANNER if models.demo else ""
    if missing:
        text += ("\n\n" if text else "") + f"<small>Not available here: {html.escape(missing)} " \
                                              "(their weights are missing; `capscope models` lists what to get)</small>"
    first = next((m for m in available if m in token_metrics()), available[0])
    choices = [(metric_title(m), m) for m in available]
    return gr.update(value=text, visible=bool(text)), gr.update(choices=choices, value=first)


# ---------------------------------------------------------------- layout

def hands_over_the_file(image: gr.Image) -> gr.Image:
    """`image` with its handlers given the uploaded file's path unopened.
    Gradio's Image opens the file with Pillow first, so a file that is not an
    image, or a pixel bomb, failed there as a raw Gradio error; capscope's
    `read_image` reads it instead, under capscope's limits, with one line for
    what is wrong. (Only uploaded files reach here: app/server/guards.py.) Set
    on the instance: a subclass would make Gradio write a .pyi stub beside
    this module at import."""

    def preprocess(payload) -> str | None:
        if payload is None:
            return None
        if not payload.path:
            raise gr.Error("Upload the image as a file.", print_exception=False)
        return str(payload.path)

    image.preprocess = preprocess
    return image


def build_inspect(models: Models, examples: list[dict], clicks: ClickService | None = None, store=None) -> dict:
    """The Inspect tab's components and listeners (inside an open Blocks); `clicks`: the
    server's click service (Annotate's and REST's), `store`: where a demo scene's ties are read."""

    c: dict = {"clicks": clicks or ClickService("auto"), "store": store}
    with gr.Row():
        with gr.Column(scale=2):
            c["image"] = hands_over_the_file(gr.Image(type="filepath", image_mode=None, label="Image", height=260,
                                                      sources=["upload", "clipboard"], elem_id="cs-image"))
            c["image_problem"] = gr.Markdown("", elem_id="cs-image-problem")  # why a picture cannot be read
            c["example"] = gr.Dropdown(
                choices=[(f"{e['id']}: {e['caption'][:60]}", i) for i, e in enumerate(examples)],
                label="…or pick a demo scene (clean and polluted caption)", value=None)
        with gr.Column(scale=3):
            c["caption_a"] = gr.Textbox(label="Caption A", lines=2, elem_id="cs-caption-a",
                                        placeholder="Type a caption; it is scored as you type")
            c["caption_b"] = gr.Textbox(label="Caption B (optional, for comparison)", lines=2, elem_id="cs-caption-b")
            c["references"] = gr.Textbox(label="References (optional, one per line)", lines=2)
            with gr.Row():
                c["metric"] = gr.Radio(choices=[(metric_title(m), m) for m in metric_names()], value=token_metrics()[0],
                                       label="Show tokens and regions by", scale=3)
                c["score"] = gr.Button("Score", variant="primary", scale=1, elem_id="cs-score")
    c["regions"] = gr.State(None)  # given boxes for a demo scene; None = propose
    c["row_a"], c["row_b"] = gr.State(None), gr.State(None)
    c["first_a"], c["first_b"] = gr.State(None), gr.State(None)  # a keystroke's row by the shown metric alone
    c["image_now"] = gr.State(None)  # the image, kept on the server: a keystroke neither sends nor decodes it
    for side in ("a", "b"):  # clicked by the page once typing pauses: score the rest
        c[f"rest_{side}"] = gr.Button(visible="hidden", elem_id=f"cs-rest-{side}")
    with gr.Row(equal_height=False):
        c["segment_mode"] = gr.Radio(INSPECT_MODES, value="match", scale=3, elem_id="cs-inspect-mode",
                                     label="A click on a picture below · a drag on it draws a box for the segmenter")
        c["add_region"] = gr.Button("Add region", size="sm", scale=1, elem_id="cs-inspect-add")
        c["next_mask"] = gr.Button("Next mask", size="sm", scale=1, elem_id="cs-inspect-next-mask")
        c["drop_region"] = gr.Button("Drop", size="sm", scale=1, elem_id="cs-inspect-drop")
        c["segment_note"] = gr.Markdown("", elem_id="cs-inspect-segment")
    c["ties"] = gr.Markdown("", elem_id="cs-inspect-ties")
    with gr.Row(elem_classes="cs-hidden"):
        c["box"] = gr.Textbox("", max_length=MAX_BOX_TEXT, elem_id="cs-inspect-box")  # a drag's box (hotkeys.js)
    c["segment_draft"] = gr.State(empty_segment_draft())  # the region being made; nothing of it is stored
    with gr.Row(equal_height=False):
        for side in ("a", "b"):
            with gr.Column():
                c[f"overlay_{side}"] = gr.Image(label=f"Regions · caption {side.upper()}", interactive=False,
                                                buttons=[], height=380, elem_id=f"cs-overlay-{side}",
                                                format="jpeg")  # 1 ms to encode a 640 x 427 overlay; webp 29
                c[f"tokens_{side}"] = gr.HighlightedText(
                    label=f"Caption {side.upper()} · red: unsupported word, purple: supported",
                    interactive=False, show_legend=True, elem_id=f"cs-tokens-{side}", elem_classes="cs-tokens")
                gr.Markdown(SHADE_LEGEND, elem_id=f"cs-shade-legend-{side}")  # what the −1…+1 bar means
                c[f"summary_{side}"] = gr.Markdown()
                c[f"region_{side}"] = gr.Markdown("Click inside a region to see what in the caption matches it.",
                                                  elem_id=f"cs-match-{side}")
                c[f"phrases_{side}"] = gr.Markdown()
    c["table"] = gr.Dataframe(headers=["metric", "score", "caption A", "caption B", "range", "better",
                                       "what it is"], label="Global scores", interactive=False, wrap=True,
                              column_widths=["9%", "10%", "8%", "8%", "17%", "11%", "37%"],
                              elem_classes="cs-scores")
    _wire_inspect(models, examples, c)
    return c


def store_of(c: dict):
    return c.get("store")


class LatestShown:
    """Which of a page's overlapping scorings may still change what it shows.

    A caption column is scored by several events (a keystroke's words, the
    re-score once typing pauses, an upload's or a button's whole row), which
    run side by side and can finish out of order: a slow whole-row scoring of
    an older caption would otherwise overwrite the words of the newer one
    (the page then shows a caption the box no longer holds). Each scoring
    takes a ticket as it starts; its answer is dropped when a scoring that
    started later, of another caption, has already been shown (one of the
    same caption agrees with it, and a whole row adds to a keystroke's words).
    Kept for the `pages` last used."""

    def __init__(self, pages: int = 4096):
        self.pages = pages
        self._lock = threading.Lock()
        # (session, user, side) -> [last started, last shown, the caption last shown]
        self._tickets: OrderedDict[tuple, list] = OrderedDict()

    @staticmethod
    def _key(request, side: str) -> tuple:
        # the signed-in user too: a session id is the page's to send, so nobody else's answers can be held back
        return getattr(request, "session_hash", None), getattr(request, "username", None), side

    def start(self, request, side: str) -> int:
        key = self._key(request, side)
        with self._lock:
            entry = self._tickets.setdefault(key, [0, 0, None])
            self._tickets.move_to_end(key)
            entry[0] += 1
            while len(self._tickets) > self.pages:
                self._tickets.popitem(last=False)
            return entry[0]

    def may_show(self, request, side: str, ticket: int, caption: str | None) -> bool:
        """Whether the answer of scoring `ticket`, for `caption`, may be shown."""
        key = self._key(request, side)
        if key[0] is None:  # not a page's session (a direct API call): nothing to overwrite
            return True
        with self._lock:
            entry = self._tickets.get(key)
            if entry is None:
                return True
            if ticket < entry[1] and caption != entry[2]:
                return False
            if ticket > entry[1]:
                entry[1], entry[2] = ticket, caption
            return True

    def answer(self, request, side: str, caption: str | None, compute: Callable[[], tuple]) -> tuple:
        """`compute()`'s outputs, or a skip of each when they were overtaken meanwhile."""
        ticket = self.start(request, side)
        shown = compute()
        return shown if self.may_show(request, side, ticket, caption) else tuple(gr.skip() for _ in shown)


def _wire_inspect(models: Models, examples: list[dict], c: dict) -> None:
    model_queue = SCORING_EVENTS  # the scorer's own turns, not Gradio's queue
    latest = LatestShown()

    def column_outputs(side: str) -> list:
        """What `column_view` fills: the row, its column and the table."""
        return [c[f"row_{side}"], c[f"overlay_{side}"], c[f"tokens_{side}"], c[f"summary_{side}"],
                c[f"phrases_{side}"], c["table"]]

    def make_scorer(side: str):
        other = "b" if side == "a" else "a"

        def score_side(image, caption, references, metric, regions, other_row, request: gr.Request):
            return latest.answer(request, side, caption, lambda: column_view(
                side, image, score_caption(models, image, caption, references, regions, user=user_of(request)),
                other_row, metric))

        inputs = [c["image"], c[f"caption_{side}"], c["references"], c["metric"], c["regions"], c[f"row_{other}"]]
        return score_side, inputs, column_outputs(side)

    def make_rest(side: str):
        other = "b" if side == "a" else "a"

        def rest_side(image, caption, references, metric, regions, other_row, first, request: gr.Request):
            # the words too: a keystroke refused as busy (or overtaken) left them on an older caption
            return latest.answer(request, side, caption, lambda: column_view(
                side, image, score_rest(models, image, caption, references, regions, first, user=user_of(request)),
                other_row, metric))

        inputs = [c["image_now"], c[f"caption_{side}"], c["references"], c["metric"], c["regions"],
                  c[f"row_{other}"], c[f"first_{side}"]]
        return rest_side, inputs, column_outputs(side)

    def make_words_first(side: str):
        def first_side(image, caption, references, metric, regions, request: gr.Request):
            return latest.answer(request, side, caption, lambda: words_first(
                models, image, caption, references, regions, metric, user=user_of(request)))

        inputs = [c["image_now"], c[f"caption_{side}"], c["references"], c["metric"], c["regions"]]
        return first_side, inputs, [c[f"first_{side}"], c[f"tokens_{side}"]]

    def make_click(side: str):
        def on_click(image, row_a, row_b, metric, mode, draft, evt: gr.SelectData, request: gr.Request):
            if mode not in ("segment+", "segment-"):  # what in the caption matches the region clicked
                shown, report = click_report(models, image, row_a if side == "a" else row_b, metric, evt.index,
                                             user=user_of(request))
                overlays = (shown, gr.skip()) if side == "a" else (gr.skip(), shown)
                return (*overlays, report, gr.skip(), gr.skip())
            draft, note = segment_on_inspected(c["clicks"], image, draft, user_of(request), point=evt.index,
                                               positive=mode == "segment+")
            overlays = (drafted_overlay(image, row_a, metric, draft), drafted_overlay(image, row_b, metric, draft))
            return (*overlays, gr.skip(), note, draft)
        return on_click

    c["image"].change(take_image, c["image"], [c["image_now"], c["image_problem"]], queue=False,
                      api_visibility="private")
    for side in ("a", "b"):
        # A keystroke shades the words by the shown metric alone, outside Gradio's queue (so that it
        # waits behind no other user's whole re-score); the other metrics, the region overlay, the
        # table and the words again follow once typing pauses (static/hotkeys.js clicks a hidden button
        # 250 ms after the caption last changed). `latest` keeps an overtaken answer from overwriting a newer one.
        fn, inputs, outputs = make_words_first(side)
        c[f"caption_{side}"].input(fn, inputs, outputs, trigger_mode="always_last", show_progress="hidden",
                                   api_visibility="private", queue=False)
        rest, rest_inputs, rest_outputs = make_rest(side)
        c[f"rest_{side}"].click(rest, rest_inputs, rest_outputs, trigger_mode="always_last", show_progress="hidden",
                                api_visibility="private", **model_queue)
        fn, inputs, outputs = make_scorer(side)
        c["score"].click(fn, inputs, outputs, api_name=f"score_{side}", **model_queue)
        c["references"].submit(fn, inputs, outputs, api_visibility="private", **model_queue)

        c[f"overlay_{side}"].select(
            make_click(side), [c["image"], c["row_a"], c["row_b"], c["metric"], c["segment_mode"], c["segment_draft"]],
            [c["overlay_a"], c["overlay_b"], c[f"region_{side}"], c["segment_note"], c["segment_draft"]],
            trigger_mode="multiple", api_visibility="private", **model_queue)

    def on_drag(image, row_a, row_b, metric, mode, draft, value, request: gr.Request):
        draft, note = segment_on_inspected(c["clicks"], image, draft, user_of(request), drag=value)
        overlays = (drafted_overlay(image, row_a, metric, draft), drafted_overlay(image, row_b, metric, draft))
        turned = "segment+" if draft.get("box") and mode not in ("segment+", "segment-") else gr.skip()
        return (*overlays, note, draft, turned)

    # static/hotkeys.js writes a drag's box (with a count, so each drag is a change) into the hidden field
    c["box"].change(on_drag, [c["image"], c["row_a"], c["row_b"], c["metric"], c["segment_mode"],
                              c["segment_draft"], c["box"]],
                    [c["overlay_a"], c["overlay_b"], c["segment_note"], c["segment_draft"], c["segment_mode"]],
                    trigger_mode="multiple", api_visibility="private", **model_queue)

    def add_region(image, row_a, regions, draft):
        draft = segment_draft_of(draft, image)
        if draft["mask"] is None:
            raise gr.Error("Nothing to add: click the object with Segment +, or drag a box around it.",
                           print_exception=False)
        try:
            given = regions_with(row_a, regions, draft["mask"])
        except Invalid as err:
            raise gr.Error(str(err), print_exception=False) from None
        return given, empty_segment_draft(draft["image"]), f"Region {len(given)} added: scoring both captions again…"

    added = c["add_region"].click(add_region, [c["image"], c["row_a"], c["regions"], c["segment_draft"]],
                                  [c["regions"], c["segment_draft"], c["segment_note"]], api_visibility="private",
                                  **model_queue)
    for side in ("a", "b"):
        fn, inputs, outputs = make_scorer(side)
        added = added.success(fn, inputs, outputs, api_visibility="private", **model_queue)
    added.success(lambda regions: f"Region {len(regions or [])} added and scored (this inspection only: "
                  "nothing is stored).", c["regions"], c["segment_note"], api_visibility="private", queue=False)

    def next_mask(image, row_a, row_b, metric, draft):
        draft, note = next_inspected_mask(draft, image)
        return (drafted_overlay(image, row_a, metric, draft), drafted_overlay(image, row_b, metric, draft),
                note, draft)

    c["next_mask"].click(next_mask, [c["image"], c["row_a"], c["row_b"], c["metric"], c["segment_draft"]],
                         [c["overlay_a"], c["overlay_b"], c["segment_note"], c["segment_draft"]],
                         trigger_mode="multiple", api_visibility="private", **model_queue)

    def drop_region(image, row_a, row_b, metric):
        draft = empty_segment_draft(None if image is None else str(image))
        return (drafted_overlay(image, row_a, metric, draft), drafted_overlay(image, row_b, metric, draft),
                "The region being made was dropped.", draft)

    c["drop_region"].click(drop_region, [c["image"], c["row_a"], c["row_b"], c["metric"]],
                           [c["overlay_a"], c["overlay_b"], c["segment_note"], c["segment_draft"]],
                           api_visibility="private", **model_queue)

    def redraw(image, metric, row_a, row_b):
        return (*caption_view(image, row_a, metric), *caption_view(image, row_b, metric))

    views = [c[k] for s in ("a", "b") for k in (f"overlay_{s}", f"tokens_{s}", f"summary_{s}", f"phrases_{s}")]
    c["metric"].change(redraw, [c["image"], c["metric"], c["row_a"], c["row_b"]], views, api_visibility="private")

    def pick_example(index):
        if index is None or not 0 <= index < len(examples):
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        example = examples[index]
        return scratch_copy(example["path"]), example["caption"], example.get("twin_caption", ""), example["regions"]

    c["scorers"] = [make_scorer(side) for side in ("a", "b")]  # for other tabs that fill Inspect
    picked = c["example"].change(pick_example, c["example"], [c["image"], c["caption_a"], c["caption_b"], c["regions"]],
                                 api_visibility="private")
    for side in ("a", "b"):
        fn, inputs, outputs = make_scorer(side)
        picked = picked.then(fn, inputs, outputs, api_visibility="private", **model_queue)
    c["example"].change(lambda index: inspect_ties(store_of(c), examples[index]) if index is not None
                        and 0 <= index < len(examples) else "", c["example"], c["ties"], api_visibility="private")
    uploaded = c["image"].upload(lambda: (None, ""), None, [c["regions"], c["ties"]], api_visibility="private")
    for side in ("a", "b"):
        fn, inputs, outputs = make_scorer(side)
        uploaded = uploaded.then(fn, inputs, outputs, api_visibility="private", **model_queue)
