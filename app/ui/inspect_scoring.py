"""Inspect's handlers' logic as plain functions: the picture decoded under
capscope's limits, a caption scored (words first, then the rest), what a scored
column shows, a click's region report, and which of a page's overlapping
scorings may still change what it shows (`LatestShown`)."""
from __future__ import annotations

import functools
import html
import logging
import os
import threading
from collections import OrderedDict
from typing import Callable

import gradio as gr

from capscope.common.errors import CapscopeError, first_line
from capscope.metrics.images import read_image
from capscope.server.scoring import Models, ScoringBusy
from capscope.pictures import draw as ui_draw
from capscope.ui.caption_shading import shaded_tokens, token_metrics
from capscope.ui.inspect_views import (overlay, parse_references, phrases_markdown, region_boxes, region_report,
                                       scores_rows, summary_markdown)

log = logging.getLogger(__name__)


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
