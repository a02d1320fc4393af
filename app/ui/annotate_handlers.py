"""Annotate's event handlers (`AnnotateHandlers`) and `run`, which applies an
action for the request's user and draws every output (`OUTPUTS`, in order)."""
from __future__ import annotations

import html
from typing import Callable

import gradio as gr

from capscope.annotation.refusals import AnnotationError
from capscope.annotation.browse import dataset_names
from capscope.annotation.queue import DEMO_DATASET
from capscope.annotation.users import annotate_dataset, set_annotate_dataset
from capscope.ui.annotate_actions import (act_on_region, add_draft, change_labels, click_picture, current_item,
                                          current_or_next, draft_of, drag_on_picture, drop_draft, finish_item,
                                          flag_item, next_mask, open_next, open_previous, pick_word)
from capscope.ui.annotate_drawing import render
from capscope.ui.annotator import Annotator

ALL_DATASETS = "every dataset (demo last)"  # the picker's choice for no dataset
# what every handler returns, in this order
OUTPUTS = ("item_id", "header", "image", "gallery", "tokens", "saved", "progress", "suggested", "ties", "draft")


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
            item = current_or_next(annotator, user, item_id)
            note = f"⚠ not saved: {html.escape(str(err))}"
        same_item = item is not None and item["item_id"] == item_id
        return render(annotator, user, item, note, show, compute, words_only and same_item)


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
