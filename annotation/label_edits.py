"""A change to an annotator's labels, checked against the item before it is written.

A `Change` takes (session, assignment, current label state) and gives the new
state with the revision's action and undo target, or None for no change;
annotation/workflow.py runs it under the assignment's row lock and stores
the result as the next revision."""
from __future__ import annotations

from typing import Callable, Iterable

from sqlalchemy import func, select

from capscope.annotation.refusals import Invalid
from capscope.annotation.removed_regions import removed_indices
from capscope.annotation.revisions import LabelState, head_revision
from capscope.db import Assignment, Caption, Region, Token

STATUSES = ("draft", "submitted", "skipped")

Change = Callable[[object, Assignment, LabelState], tuple[LabelState, str, int | None] | None]


def item_size(session, caption_id: int) -> tuple[int, int]:
    n_tokens = select(func.count()).select_from(Token).where(Token.caption_id == caption_id).scalar_subquery()
    n_regions = (select(func.count()).select_from(Region).join(Caption, Caption.image_id == Region.image_id)
                 .where(Caption.id == caption_id).scalar_subquery())
    return tuple(session.execute(select(n_tokens, n_regions)).one())


def checked_indices(values: Iterable, size: int, what: str) -> set[int]:
    indices = set()
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"{what} indices must be integers, got {value!r}")
        if not 0 <= value < size:
            raise Invalid(f"{what} index {value} is out of range (this item has {size} {what}s)")
        indices.add(value)
    return indices


def _resolved_status(current: str, requested: str) -> str:
    if requested not in STATUSES:
        raise Invalid(f"status must be one of {', '.join(STATUSES)}, got {requested!r}")
    # a draft save after submitting is an edit of the submitted labels
    return "submitted" if requested == "draft" and current == "submitted" else requested


def checked_links(values: Iterable, n_tokens: int, n_regions: int) -> frozenset[tuple[int, int]]:
    pairs = set()
    for value in values:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise Invalid(f"a link is [token_index, region_index], got {value!r}")
        (token,) = checked_indices([value[0]], n_tokens, "token")
        (region,) = checked_indices([value[1]], n_regions, "region")
        pairs.add((token, region))
    return frozenset(pairs)


def label_edit(new_tokens: Iterable[int] | None, new_regions: Iterable[int] | None, requested_status: str | None,
          new_junk: Iterable[int] | None = None, new_links: Iterable | None = None,
          sent: list[int | None] | None = None) -> Change:
    """A change to the given parts of the label state (None: that part stays); `sent`: how
    many of each a client sent, duplicates included (`_checked_sizes`)."""
    def change(session, assignment, state: LabelState):
        n_tokens, n_regions = item_size(session, assignment.caption_id)
        if sent is not None:
            _checked_sizes(sent, n_tokens, n_regions)
        tokens = state.tokens if new_tokens is None else frozenset(checked_indices(new_tokens, n_tokens, "token"))
        regions = state.regions if new_regions is None else frozenset(
            checked_indices(new_regions, n_regions, "region"))
        junk = state.junk if new_junk is None else frozenset(checked_indices(new_junk, n_regions, "region"))
        links = state.links if new_links is None else checked_links(new_links, n_tokens, n_regions)
        both = regions & junk
        if both:
            raise Invalid(f"region {min(both)} cannot be both mentioned and junk (no object)")
        _refuse_removed(session, assignment.caption_id, (regions - state.regions) | (junk - state.junk)
                        | {r for _, r in links - state.links})
        status = state.status if requested_status is None else _resolved_status(state.status, requested_status)
        head = head_revision(session, assignment)
        edited = LabelState(tokens, regions, status, junk, links)
        labels_changed = (tokens, regions, junk, links) != (state.tokens, state.regions, state.junk, state.links)
        # a change of status alone is not an undo step: undo skips over it
        undo_to = assignment.revision if labels_changed else (head.undo_to if head else None)
        action = "edit" if labels_changed else status
        return edited, action, undo_to

    return change


def _refuse_removed(session, caption_id: int, named: set[int]) -> None:
    """A new label or tie may not name a region that was taken away."""
    if not named:
        return
    gone = named & removed_indices(session, caption_id)
    if gone:
        raise Invalid(f"region {min(gone)} was taken away; reload the item")


def _listed(values: Iterable | None) -> list | None:
    return None if values is None else values if isinstance(values, (list, tuple, set, frozenset)) else list(values)


def _unique_indices(values: Iterable, what: str) -> frozenset[int]:
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"{what} indices must be integers, got {value!r}")
    return frozenset(values)


def _unique_pairs(values: Iterable) -> frozenset[tuple[int, int]]:
    pairs = set()
    for value in values:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise Invalid(f"a link is [token_index, region_index], got {value!r}")
        _unique_indices(value[:1], "token")
        _unique_indices(value[1:], "region")
        pairs.add((value[0], value[1]))
    return frozenset(pairs)


def _checked_sizes(sent: list[int | None], n_tokens: int, n_regions: int) -> None:
    """A save's lists are at most as long as the item allows (duplicates included)."""
    most = (n_tokens, n_regions, n_regions, n_tokens * n_regions)
    for count, limit, what in zip(sent, most, ("incorrect tokens", "mentioned regions", "junk regions", "ties")):
        if count is not None and count > limit:
            raise Invalid(f"{count} {what} sent; this item has room for {limit}")


def toggle_change(kind: str, index: int) -> Change:
    def change(session, assignment, state: LabelState):
        n_tokens, n_regions = item_size(session, assignment.caption_id)
        checked_indices([index], n_tokens if kind == "token" else n_regions, "token" if kind == "token" else "region")
        if kind == "token":
            return label_edit(state.tokens ^ {index}, None, None)(session, assignment, state)
        if kind == "region":  # mentioning a region takes back a junk mark on it
            return label_edit(None, state.regions ^ {index}, None, state.junk - {index})(session, assignment, state)
        return label_edit(None, state.regions - {index}, None, state.junk ^ {index})(session, assignment, state)

    return change


def requested_edit(incorrect_tokens: Iterable[int] | None, mentioned_regions: Iterable[int] | None,
                   junk_regions: Iterable[int] | None, links: Iterable | None, status: str | None) -> Change:
    """A client's lists (None: that part stays) as a change: each checked for its types and made
    unique before any lock is taken, so that a write is held for what the item can hold, not for
    what was sent; how many were sent (duplicates included) is checked against the item."""
    given = (incorrect_tokens, mentioned_regions, junk_regions, links)
    sent = [None if values is None else len(values) for values in map(_listed, given)]
    tokens, regions, junk = (None if v is None else _unique_indices(v, what)
                             for v, what in zip(given, ("token", "region", "region")))
    pairs = None if links is None else _unique_pairs(links)
    return label_edit(tokens, regions, status, junk, pairs, sent=sent)


def link_toggle(token: int, region: int) -> Change:
    """Tie a word to a region, or untie it."""
    def change(session, assignment, state: LabelState):
        n_tokens, n_regions = item_size(session, assignment.caption_id)
        pair = next(iter(checked_links([(token, region)], n_tokens, n_regions)))
        return label_edit(None, None, None, None, state.links ^ {pair})(session, assignment, state)

    return change
