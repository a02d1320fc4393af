"""The Review tab's steps for one user, independent of Gradio (`Reviewing`), and
its event handlers (`ReviewHandlers`), each of which returns every output
(`OUTPUTS`, in order). Every handler reads the judgement back from the store and
checks the user's role there."""
from __future__ import annotations

import html

import gradio as gr

from capscope.annotation import review, workflow
from capscope.annotation.refusals import AnnotationError
from capscope.annotation.users import UserInfo, get_user
from capscope.db import Store
from capscope.pictures import draw as ui_draw
from capscope.ui.reviewing_copy import (changes, describe, fresh_work, header, history_html, picture, token_values,
                                        toggled, undone)

ALL = "all datasets with review on"
OUTPUTS = ("view", "work", "header", "image", "gallery", "tokens", "diff", "history", "status", "comment")


class Reviewing:
    """What the Review tab does for one user, independent of Gradio."""

    def __init__(self, store: Store, lease_seconds: int = workflow.LEASE_SECONDS):
        self.store, self.lease = store, lease_seconds

    def user(self, name: str | None) -> UserInfo:
        if not name:
            raise AnnotationError("not logged in")
        user = get_user(self.store, name)
        review.check_reviewer(user)
        return user

    def _with_path(self, user: UserInfo, view: dict | None) -> dict | None:
        if view is not None:
            view["_path"] = workflow.image_path(self.store, user, view["image_id"])
        return view

    def next(self, user: UserInfo, dataset: str | None, after: int | None = None) -> dict | None:
        found = review.next_for_review(self.store, user, dataset, after)
        if found is None and after is not None:  # past the last one: from the first again
            found = review.next_for_review(self.store, user, dataset)
        return self._with_path(user, found)

    def get(self, user: UserInfo, assignment_id: int) -> dict:
        return self._with_path(user, review.get_review(self.store, user, assignment_id))

    def waiting(self, user: UserInfo, dataset: str | None) -> int:
        return review.pending_count(self.store, user, dataset)

    def decide(self, user: UserInfo, view: dict, work: dict, decision: str, comment: str | None) -> dict:
        corrected = {}
        if decision == "correct":
            corrected = {"incorrect_tokens": work["tokens"], "mentioned_regions": work["regions"],
                         "junk_regions": work["junk"]}
        return review.decide(self.store, user, view["assignment_id"], decision, comment,
                             lease_seconds=self.lease, **corrected)


def dataset_choice(value: str | None) -> str | None:
    return None if not value or value == ALL else value


def settings_text(settings: list[dict]) -> str:
    if not settings:
        return "No datasets yet."
    lines = [f"- **{html.escape(s['dataset'])}**: review {'on' if s['review'] else 'off'} · {s['pending']} "
             f"pending · {s['returned']} sent back" for s in settings]
    return "\n".join(lines)


class ReviewHandlers:
    """The tab's event handlers; each returns every output (OUTPUTS)."""

    def __init__(self, reviewing: Reviewing):
        self.reviewing = reviewing

    def _draw(self, user: UserInfo, view: dict | None, work: dict, status: str, dataset, clear: bool = False):
        comment = "" if clear else gr.skip()
        if view is None:
            return (None, fresh_work(None), "**Nothing waits for review.** Judgements appear here once "
                    "submitted in a dataset with review on.", None, [], [], "", "", status, comment)
        overlay, thumbs = picture(view, work)
        waiting = self.reviewing.waiting(user, dataset_choice(dataset))
        return (view, work, header(view, waiting), overlay, thumbs, token_values(view, work),
                describe(view, changes(view, work)), history_html(view), status, comment)

    def _run(self, request, dataset, step):
        """`step(user) -> (view, work, status, clear)`, drawn; refusals go to the status line."""
        try:
            user = self.reviewing.user(getattr(request, "username", None))
        except AnnotationError as err:
            return (None, fresh_work(None), f"**{html.escape(str(err))}**", None, [], [], "", "", "",
                    gr.skip())
        try:
            view, work, status, clear = step(user)
        except AnnotationError as err:
            return (*(gr.skip() for _ in OUTPUTS[:-2]), f"⚠ {html.escape(str(err))}", gr.skip())
        return self._draw(user, view, work, status, dataset, clear)

    def open(self, dataset, request: gr.Request):
        def step(user):
            view = self.reviewing.next(user, dataset_choice(dataset))
            return view, fresh_work(view), "", True
        return self._run(request, dataset, step)

    def skip(self, view, dataset, request: gr.Request):
        def step(user):
            after = view["assignment_id"] if view else None
            found = self.reviewing.next(user, dataset_choice(dataset), after)
            return found, fresh_work(found), "skipped" if view else "", True
        return self._run(request, dataset, step)

    def _current(self, user, view, work):
        """The judgement on screen read again, with the working copy when it is this judgement's."""
        fresh = self.reviewing.get(user, view["assignment_id"])
        return fresh, (work if work.get("assignment") == fresh["assignment_id"] else fresh_work(fresh))

    def toggle(self, view, work, dataset, part: str, index: int, request):
        def step(user):
            if view is None:
                raise AnnotationError("no judgement on screen")
            fresh, current = self._current(user, view, work)
            size = len(fresh["tokens"]) if part == "tokens" else len(fresh["regions"])
            if not 0 <= index < size:
                raise AnnotationError(f"there is no {'word' if part == 'tokens' else 'region'} {index + 1}")
            return fresh, toggled(current, part, index), "", False
        return self._run(request, dataset, step)

    def on_word(self, view, work, dataset, evt: gr.SelectData, request: gr.Request):
        return self.toggle(view, work, dataset, "tokens", int(evt.index), request)

    def on_thumbnail(self, view, work, dataset, evt: gr.SelectData, request: gr.Request):
        return self.toggle(view, work, dataset, "regions", int(evt.index), request)

    def on_image(self, view, work, dataset, evt: gr.SelectData, request: gr.Request):
        if view is None:
            return self.open(dataset, request)
        region = ui_draw.clicked_region([r["box"] for r in view["regions"]], (view["width"], view["height"]),
                                        evt.index)
        if region is None:
            return (*(gr.skip() for _ in OUTPUTS[:-2]), "no region under that point", gr.skip())
        return self.toggle(view, work, dataset, "regions", region, request)

    def on_region_key(self, key, view, work, dataset, request: gr.Request):
        return self.toggle(view, work, dataset, "regions", int(key) - 1, request)

    def undo(self, view, work, dataset, request: gr.Request):
        def step(user):
            if view is None:
                raise AnnotationError("no judgement on screen")
            fresh, current = self._current(user, view, work)
            return fresh, undone(current), "" if current["steps"] else "nothing of yours to undo", False
        return self._run(request, dataset, step)

    def decide(self, view, work, dataset, comment, decision: str, request):
        def step(user):
            if view is None:
                raise AnnotationError("no judgement on screen")
            fresh, current = self._current(user, view, work)
            chosen = decision
            if chosen == "shown":
                chosen = "correct" if changes(fresh, current) else "accept"
            if chosen == "accept" and changes(fresh, current):
                raise AnnotationError("you changed the labels: Correct (c) keeps your changes, Undo (u) takes "
                                      "them back")
            done = self.reviewing.decide(user, fresh, current, chosen, comment)
            note = f"item {done['item_id']} by {html.escape(fresh['annotator'])}: {done['decision']}"
            found = self.reviewing.next(user, dataset_choice(dataset), fresh["assignment_id"])
            if found is None or found["assignment_id"] == fresh["assignment_id"]:
                # nothing else waits: the judgement just decided stays on screen, with its whole history
                found = self.reviewing.get(user, fresh["assignment_id"])
                note += " · nothing else waits for review"
            return found, fresh_work(found), note, True
        return self._run(request, dataset, step)

    def accept(self, view, work, dataset, comment, request: gr.Request):
        return self.decide(view, work, dataset, comment, "accept", request)

    def correct(self, view, work, dataset, comment, request: gr.Request):
        return self.decide(view, work, dataset, comment, "correct", request)

    def send_back(self, view, work, dataset, comment, request: gr.Request):
        return self.decide(view, work, dataset, comment, "return", request)

    def as_shown(self, view, work, dataset, comment, request: gr.Request):
        return self.decide(view, work, dataset, comment, "shown", request)

    # ---- the tab's setup and the admin switch

    def choices(self, request: gr.Request):
        """On page load: the datasets to review in, and the admin switch for admins only."""
        try:
            user = get_user(self.reviewing.store, getattr(request, "username", None) or "")
        except AnnotationError:
            user = None
        if user is None or not review.may_review(user):  # the tab is hidden: nothing of it goes to the page
            return (gr.Dropdown(choices=[ALL], value=ALL), gr.Accordion(visible=False), gr.Dropdown(choices=[]),
                    gr.Checkbox(value=False), "")
        settings = review.review_settings(self.reviewing.store)
        names = [s["dataset"] for s in settings]
        reviewed = [s["dataset"] for s in settings if s["review"]]
        admin = bool(user and user.is_admin)
        first = names[0] if names else None
        on = bool(settings and settings[0]["review"])
        return (gr.Dropdown(choices=[ALL, *reviewed], value=ALL), gr.Accordion(visible=admin),
                gr.Dropdown(choices=names, value=first), gr.Checkbox(value=on),
                settings_text(settings) if admin else "")

    def switch_shown(self, dataset, request: gr.Request):
        settings = {s["dataset"]: s for s in review.review_settings(self.reviewing.store)}
        return gr.Checkbox(value=bool(settings.get(dataset, {}).get("review")))

    def switch(self, dataset, on, request: gr.Request):
        try:
            user = get_user(self.reviewing.store, getattr(request, "username", None) or "")
            if not dataset:
                raise AnnotationError("pick a dataset")
            review.set_review(self.reviewing.store, user, dataset, bool(on))
            note = ""
        except AnnotationError as err:
            note = f"⚠ {html.escape(str(err))}\n\n"
        settings = review.review_settings(self.reviewing.store)
        reviewed = [s["dataset"] for s in settings if s["review"]]
        return gr.Dropdown(choices=[ALL, *reviewed]), note + settings_text(settings)
