"""Inspect: one image, one or two captions, every metric's verdict drawn on them.

Plain functions turn a scorer row (docs/formats.md §2) into what the components
show (capscope.ui.inspect_views), score and answer the handlers
(capscope.ui.inspect_scoring) and segment the inspected picture
(capscope.ui.inspect_segmenting); `build_inspect` wires them. Scoring goes
through `Models`, whose scorer caches the image side, so an edited caption costs
only its text, in the signed-in user's turn. The image travels as a file: Gradio
hands the handlers the uploaded (or picked) file itself, which capscope decodes
under its own limits, so every path into Inspect scores the file's own pixels,
never a re-encoded copy."""
from __future__ import annotations

import html
import logging

import gradio as gr

from capscope.annotation.refusals import Invalid
from capscope.common.errors import first_line
from capscope.metrics.registry import metric_names, metric_title
from capscope.server.scoring import Models
from capscope.server.segmenting import ClickService
from capscope.ui.caption_shading import SHADE_LEGEND, token_metrics
from capscope.ui.inspect_scoring import (LatestShown, caption_view, click_report, column_view, score_caption,
                                         score_rest, take_image, user_of, words_first)
from capscope.ui.inspect_segmenting import (INSPECT_MODES, drafted_overlay, empty_segment_draft, next_inspected_mask,
                                            regions_with, segment_draft_of, segment_on_inspected)
from capscope.ui.segment_drafts import MAX_BOX_TEXT
from capscope.ui.shared import SCORING_EVENTS, scratch_copy

DEMO_BANNER = ("⚠ **Demo model in use.** Pretrained weights cannot be had here, so capscope scores with its "
               "bundled demo model, which knows coloured shapes on plain backgrounds, not photos. "
               "See `capscope models` for what is missing.")

log = logging.getLogger(__name__)


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
