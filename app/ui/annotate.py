"""Annotate: the annotator's queue, one click = one saved label.

The database is the source of truth: every handler reads the item and its
labels back from the store (`capscope.annotation.workflow`) and redraws from
that, so a reload, a second tab or a lost response never shows stale labels.
Each click saves inside its own handler and answers with the saved revision.
Handlers taking `gr.SelectData` only unpack the event and call a plain
function that takes the index. The Gradio-free parts live beside this module:
`Annotator` (capscope.ui.annotator), the actions (capscope.ui.annotate_actions),
what the tab draws (capscope.ui.annotate_drawing) and the event handlers
(capscope.ui.annotate_handlers)."""
from __future__ import annotations

import gradio as gr

from capscope.annotation import workflow
from capscope.ui.annotate_actions import MODES, empty_draft
from capscope.ui.annotate_handlers import ALL_DATASETS, OUTPUTS, AnnotateHandlers
from capscope.ui.annotator import Annotator
from capscope.ui.segment_drafts import MAX_BOX_TEXT
from capscope.ui.shared import SCORING_EVENTS

MAX_REGION_KEYS = 10
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


# ---------------------------------------------------------------- wiring

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
