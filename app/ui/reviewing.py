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
store and checks the user's role there: a hidden tab is no permission. The
working copy and its drawing are in capscope.ui.reviewing_copy, the steps and
handlers in capscope.ui.reviewing_handlers; this module lays out and wires."""
from __future__ import annotations

import gradio as gr

from capscope.annotation import review
from capscope.db import Store
from capscope.ui.reviewing_copy import fresh_work
from capscope.ui.reviewing_handlers import ALL, OUTPUTS, ReviewHandlers, Reviewing

MAX_REGION_KEYS = 10  # as in Annotate: keys 1-9 and 0
KEYS_HELP = ("<span class='cs-keys'>Keys: <kbd>1</kbd>–<kbd>9</kbd>, <kbd>0</kbd> region 1–10 · "
             "<kbd>s</kbd>/<kbd>Enter</kbd> decide as shown (accept, or correct when you changed labels) · "
             "<kbd>a</kbd> accept · <kbd>c</kbd> correct · <kbd>r</kbd> send back (write the comment first) · "
             "<kbd>u</kbd>/<kbd>z</kbd> undo your last change · <kbd>k</kbd> skip · <kbd>n</kbd> next · "
             "<kbd>←</kbd>/<kbd>→</kbd> + <kbd>Enter</kbd> on words</span>")

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
