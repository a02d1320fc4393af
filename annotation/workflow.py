"""Queue and labels: the calls an annotator's client makes (REST and Gradio alike).

Queue: each caption ("item") goes to `annotators_needed` annotators, never
twice to one. A slot is held by a submitted assignment or by a draft whose
lease has not expired; skipped items and abandoned drafts free their slot.
`next_item` first resumes the annotator's own open draft; `previous_item`
walks back through the items they submitted.

Labels: every change is written at once as a new revision (the full label
state, kept forever), so nothing typed is lost and edits after submitting
keep their history. `undo` walks back through the label changes. Writing the
same state twice changes nothing.

Review (annotation/review.py): in a dataset with review on, a judgement
submitted becomes "pending" until a reviewer accepts, corrects or returns it;
a returned judgement is a draft again for its annotator, handed back to them
first by `next_item`, and pending again once they submit it ("resubmitted").
An annotator's edit of a judgement already reviewed sends it back to review.

Every function takes the `Store` and the acting `UserInfo` and returns plain,
JSON-ready dicts.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable

from sqlalchemy import and_, exists, func, or_, select

from capscope.annotation.access import item_caption
from capscope.annotation.item_views import item_view, labels_view, revisions_view
from capscope.annotation.label_edits import Change, label_edit, link_toggle, requested_edit, toggle_change
from capscope.annotation.refusals import Forbidden, Invalid, NotFound
from capscope.annotation.queue import candidate_captions, control_for, holds_slot, queue_order_of
from capscope.annotation.removed_regions import removed_indices, take_away, voted_by_others
from capscope.annotation.revisions import LabelState, append_revision, current_state, head_revision, write_labels
from capscope.annotation.users import UserInfo
from capscope.db import (
    Assignment,
    Caption,
    Dataset,
    Flag,
    Image,
    LabelRevision,
    Region,
    Store,
    utcnow,
)

LEASE_SECONDS = 30 * 60
IDLE_CAP = timedelta(minutes=2)  # time spent counts at most this much between two saves
FLAG_KINDS = ("unsure", "bad_image", "bad_caption", "comment")
MAX_COMMENT_CHARS = 5000


def next_item(store: Store, user: UserInfo, *, dataset: str | None = None,
              lease_seconds: int = LEASE_SECONDS, now: datetime | None = None) -> dict | None:
    """The item this user should label now: their open draft if any (its lease
    renewed), else a new one with a free slot; None when nothing is left."""
    def work(session):
        current = now or utcnow()
        lease = current + timedelta(seconds=lease_seconds)
        # a draft a reviewer sent back comes first, then the one worked on last
        returned_first = (Assignment.review_status == "returned").desc()
        draft = session.scalar(
            select(Assignment).where(Assignment.user_id == user.id, Assignment.status == "draft")
            .order_by(returned_first, Assignment.updated_at.desc(), Assignment.id.desc()).limit(1).with_for_update()
        )
        if draft is not None and (dataset is None or draft.caption.dataset.name == dataset):
            draft.lease_expires_at = lease
            return item_view(session, draft)
        assignment = _claim_new(session, user, dataset, current, lease)
        return None if assignment is None else item_view(session, assignment)

    return store.run_write(work)


def previous_item(store: Store, user: UserInfo, item_id: int | None = None) -> dict | None:
    """The item this user submitted before `item_id` (in order of first
    submission), or their latest submitted item when `item_id` is not one of
    theirs yet; None at the start. Its labels stay editable (edits keep it
    submitted and are recorded as revisions)."""
    finished = (Assignment.submitted_at, Assignment.id)
    with store.read() as session:
        query = select(Assignment).where(Assignment.user_id == user.id, Assignment.status == "submitted")
        current = None
        if item_id is not None:
            current = session.scalar(select(Assignment).where(Assignment.caption_id == item_id,
                                                              Assignment.user_id == user.id))
        if current is not None and current.status == "submitted" and current.submitted_at is not None:
            query = query.where(or_(Assignment.submitted_at < current.submitted_at,
                                    and_(Assignment.submitted_at == current.submitted_at, Assignment.id < current.id)))
        earlier = session.scalar(query.order_by(*(c.desc() for c in finished)).limit(1))
        return item_view(session, earlier) if earlier is not None else None


def _claim_new(session, user: UserInfo, dataset: str | None, now: datetime, lease: datetime) -> Assignment | None:
    order = queue_order_of(session, dataset)
    for _ in range(20):
        caption_id = session.scalar(candidate_captions(user, dataset, now, order).limit(1)
                                    .with_for_update(skip_locked=True))
        if caption_id is None:
            return None
        # recount after taking the row lock: on PostgreSQL the candidate query's
        # snapshot may predate another claim committed just before we locked
        taken = session.scalar(select(func.count()).select_from(Assignment)
                               .where(Assignment.caption_id == caption_id, holds_slot(now)))
        needed = session.scalar(select(Caption.annotators_needed).where(Caption.id == caption_id))
        if taken < needed:
            return _create_assignment(session, control_for(session, user, caption_id) or caption_id, user, now, lease)
    return None


def _create_assignment(session, caption_id: int, user: UserInfo, now: datetime, lease: datetime) -> Assignment:
    assignment = Assignment(caption_id=caption_id, user_id=user.id, status="draft", lease_expires_at=lease,
                            revision=0, created_at=now, updated_at=now)
    session.add(assignment)
    session.flush()
    session.add(LabelRevision(assignment_id=assignment.id, revision=0, action="start", status="draft",
                              incorrect_tokens=[], mentioned_regions=[], undo_to=None, created_at=now))
    return assignment


# ---------------------------------------------------------------- item views

def get_item(store: Store, user: UserInfo, item_id: int, *, include_predictions: bool = False) -> dict:
    """An item with this user's labels on it. Annotators see only items given
    to them; admins see any (with `labels` None when it is not theirs)."""
    with store.read() as session:
        caption = item_caption(session, user, item_id)
        assignment = session.scalar(select(Assignment).where(Assignment.caption_id == item_id,
                                                             Assignment.user_id == user.id))
        return item_view(session, assignment, caption, include_predictions)


def image_path(store: Store, user: UserInfo, image_id: int) -> str:
    """The file of an image the user may see (admins: any; annotators: their items'; reviewers
    also those of the datasets with review on)."""
    with store.read() as session:
        image = session.get(Image, image_id)
        if image is None:
            raise NotFound(f"no image {image_id}")
        if not user.is_admin:
            allowed = session.scalar(select(exists().where(
                Assignment.user_id == user.id, Assignment.caption_id == Caption.id, Caption.image_id == image_id)))
            if not allowed and user.role == "reviewer":
                allowed = session.scalar(select(exists().where(
                    Caption.image_id == image_id, Caption.dataset_id == Dataset.id, Dataset.review)))
            if not allowed:
                raise Forbidden(f"image {image_id} belongs to no item of yours")
        return image.path


# ---------------------------------------------------------------- changing labels

def _locked_assignment(session, user: UserInfo, item_id: int) -> Assignment:
    assignment = session.scalar(select(Assignment).where(Assignment.caption_id == item_id,
                                                         Assignment.user_id == user.id).with_for_update())
    if assignment is not None:
        return assignment
    if session.get(Caption, item_id) is None:
        raise NotFound(f"no item {item_id}")
    raise Forbidden(f"item {item_id} was not given to you")


def _apply(store: Store, user: UserInfo, item_id: int, change: Change, *,
           lease_seconds: int = LEASE_SECONDS, now: datetime | None = None) -> dict:
    """Run `change` on the current label state under a row lock and, when the
    state differs, store it as the next revision."""
    def work(session):
        current_time = now or utcnow()
        assignment = _locked_assignment(session, user, item_id)
        state = current_state(session, assignment)
        outcome = change(session, assignment, state)
        if outcome is None or outcome[0] == state:
            return labels_view(session, assignment)
        new, action, undo_to = outcome
        write_labels(session, assignment, state, new)
        _record_revision(session, assignment, new, action, undo_to, current_time, lease_seconds)
        return labels_view(session, assignment, (new, undo_to is not None))

    return store.run_write(work)


def _record_revision(session, assignment: Assignment, state: LabelState, action: str, undo_to: int | None,
                     now: datetime, lease_seconds: int) -> LabelRevision:
    status = state.status
    elapsed = max(timedelta(0), min(now - assignment.updated_at, IDLE_CAP))
    assignment.time_spent_ms += int(elapsed.total_seconds() * 1000)
    if status == "submitted" and assignment.status != "submitted":
        assignment.submitted_at = now
        action = _into_review(session, assignment, action)
    elif status == "submitted" and assignment.review_status in ("pending", "accepted", "corrected"):
        # an edit of a reviewed judgement is reviewed again; with review off it is unreviewed
        assignment.review_status = "pending" if _review_on(session, assignment) else None
    assignment.status = status
    assignment.updated_at = now
    assignment.lease_expires_at = now + timedelta(seconds=lease_seconds)
    return append_revision(session, assignment, state, action, undo_to, now)


def _review_on(session, assignment: Assignment) -> bool:
    return bool(session.scalar(select(Dataset.review).join(Caption, Caption.dataset_id == Dataset.id)
                               .where(Caption.id == assignment.caption_id)))


def _into_review(session, assignment: Assignment, action: str) -> str:
    """A judgement being submitted: pending review when its dataset has review on (the step
    named "submitted", or "resubmitted" after a reviewer sent it back), else unreviewed."""
    returned = assignment.review_status == "returned"
    if not _review_on(session, assignment):
        assignment.review_status = None
        return action
    assignment.review_status = "pending"
    return "resubmitted" if returned else "submitted"


def save_labels(store: Store, user: UserInfo, item_id: int, incorrect_tokens: Iterable[int],
                mentioned_regions: Iterable[int], status: str = "draft", *, junk_regions: Iterable[int] | None = None,
                links: Iterable | None = None, **kw) -> dict:
    """Set the label state of an item (the REST PUT); junk regions and links
    stay as they are when not given. Idempotent. The lists are checked for
    their types and made unique before the write begins, so that the write
    lock is held for what the item can hold, not for what was sent; a list
    longer than the item allows (ties: words x regions) is refused."""
    edit = requested_edit(incorrect_tokens, mentioned_regions, junk_regions, links, status)
    return _apply(store, user, item_id, edit, **kw)


def edited_state(session, assignment: Assignment, state: LabelState, incorrect_tokens: Iterable[int] | None = None,
                 mentioned_regions: Iterable[int] | None = None, junk_regions: Iterable[int] | None = None,
                 links: Iterable | None = None) -> LabelState:
    """`state` with the given parts replaced (None: that part stays), checked against the item
    as a save is (indices in range, lists no longer than the item allows, no region both
    mentioned and junk); the status stays. For a reviewer's correction (annotation/review.py)."""
    return requested_edit(incorrect_tokens, mentioned_regions, junk_regions, links, None)(
        session, assignment, state)[0]


def record_judgement(store: Store, user: UserInfo, item_id: int, incorrect_tokens: Iterable[int],
                     mentioned_regions: Iterable[int], links: Iterable | None = None,
                     junk: Iterable[int] | None = None) -> bool:
    """A judgement made elsewhere (another annotation tool) as this user's
    submitted labels of the item, its assignment created when there is none.
    False when the user's submitted labels were already these (nothing written)."""
    wanted = (frozenset(incorrect_tokens), frozenset(mentioned_regions))
    wanted_links = None if links is None else frozenset(tuple(pair) for pair in links)
    wanted_junk = None if junk is None else frozenset(junk)

    def claim(session):
        now = utcnow()
        assignment = session.scalar(select(Assignment).where(Assignment.caption_id == item_id,
                                                             Assignment.user_id == user.id).with_for_update())
        if assignment is None:
            if session.get(Caption, item_id) is None:
                raise NotFound(f"no item {item_id}")
            assignment = _create_assignment(session, item_id, user, now, now)
        return current_state(session, assignment)

    state = store.run_write(claim)
    if ((state.tokens, state.regions) == wanted and state.status == "submitted"
            and wanted_links in (None, state.links) and wanted_junk in (None, state.junk)):
        return False
    save_labels(store, user, item_id, *wanted, status="submitted", links=wanted_links, junk_regions=wanted_junk)
    return True


def toggle_token(store: Store, user: UserInfo, item_id: int, index: int, **kw) -> dict:
    """Flip one token between incorrect and correct; saved at once."""
    return _apply(store, user, item_id, toggle_change("token", index), **kw)


def toggle_region(store: Store, user: UserInfo, item_id: int, index: int, **kw) -> dict:
    """Flip one region between mentioned and not mentioned; saved at once."""
    return _apply(store, user, item_id, toggle_change("region", index), **kw)


def toggle_junk(store: Store, user: UserInfo, item_id: int, index: int, **kw) -> dict:
    """Flip one region between junk (no object) and not; junk is never mentioned."""
    return _apply(store, user, item_id, toggle_change("junk", index), **kw)


def toggle_link(store: Store, user: UserInfo, item_id: int, token: int, region: int, **kw) -> dict:
    """Tie a word to a region, or untie it; saved at once."""
    return _apply(store, user, item_id, link_toggle(token, region), **kw)


def _revision_state(revision: LabelRevision, status: str) -> LabelState:
    return LabelState(frozenset(revision.incorrect_tokens), frozenset(revision.mentioned_regions), status,
                      frozenset(revision.junk_regions or ()), frozenset(tuple(p) for p in revision.links or ()))


def undo(store: Store, user: UserInfo, item_id: int, *, lease_seconds: int = LEASE_SECONDS,
         now: datetime | None = None) -> dict:
    """Restore the labels before the last label change (the status stays); when the last
    step added a region, take that region back (annotation/removed_regions.py), unless
    someone else has voted on it since: then it stays and the undo steps over it."""
    def work(session):
        current_time = now or utcnow()
        assignment = _locked_assignment(session, user, item_id)
        state = current_state(session, assignment)
        head = head_revision(session, assignment)
        if head is None or head.undo_to is None:
            return labels_view(session, assignment)
        taken_back = None
        target = session.scalar(select(LabelRevision).where(LabelRevision.assignment_id == assignment.id,
                                                            LabelRevision.revision == head.undo_to))
        if head.region is not None:  # the last step added a region (or an undo came back to one that did)
            added = session.scalar(select(Region).join(Caption, Caption.image_id == Region.image_id)
                                   .where(Caption.id == item_id, Region.index == head.region).with_for_update())
            if added is not None and added.removed_at is None and not voted_by_others(session, added, user.id):
                take_away(session, added, user.name, "undone", current_time)
                state, taken_back = current_state(session, assignment), added.index
        gone = removed_indices(session, item_id)
        new = _revision_state(target, state.status).without_regions(gone)
        write_labels(session, assignment, state, new)
        step = _record_revision(session, assignment, new, "undo", target.undo_to, current_time, lease_seconds)
        step.region = target.region
        view = labels_view(session, assignment, (new, target.undo_to is not None))
        return view if taken_back is None else {**view, "region_taken_back": taken_back}

    return store.run_write(work)


ADD_REGION = "add region"  # the revision action of a region added, so that undo takes it back


def record_region_added(session, user: UserInfo, item_id: int, index: int, now: datetime) -> None:
    """Region `index`, just added by this user, as a step of their undo history on the item
    (nothing when the item is not given to them: an admin's add is removed, not undone)."""
    assignment = session.scalar(select(Assignment).where(Assignment.caption_id == item_id,
                                                         Assignment.user_id == user.id).with_for_update())
    if assignment is None:
        return
    state = current_state(session, assignment)
    revision = append_revision(session, assignment, state, ADD_REGION, assignment.revision, now)
    revision.region = index


def submit(store: Store, user: UserInfo, item_id: int, **kw) -> dict:
    """Submit the current labels (unflagged tokens count as correct)."""
    return _apply(store, user, item_id, label_edit(None, None, "submitted"), **kw)


def skip(store: Store, user: UserInfo, item_id: int, **kw) -> dict:
    """Give the item back: its slot goes to someone else, never again to this user."""
    return _apply(store, user, item_id, label_edit(None, None, "skipped"), **kw)


def history(store: Store, user: UserInfo, item_id: int) -> list[dict]:
    """Every revision of this user's labels on the item, oldest first."""
    with store.read() as session:
        assignment = session.scalar(select(Assignment).where(Assignment.caption_id == item_id,
                                                             Assignment.user_id == user.id))
        if assignment is None:
            raise NotFound(f"you have no labels on item {item_id}")
        return revisions_view(session, assignment)


def add_flag(store: Store, user: UserInfo, item_id: int, kind: str, comment: str = "") -> dict:
    """Note on an item: unsure, bad_image, bad_caption or a comment."""
    if kind not in FLAG_KINDS:
        raise Invalid(f"flag kind must be one of {', '.join(FLAG_KINDS)}, got {kind!r}")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT_CHARS:
        raise Invalid(f"comment must be text of at most {MAX_COMMENT_CHARS} characters")

    def work(session):
        if not user.is_admin:
            _locked_assignment(session, user, item_id)
        elif session.get(Caption, item_id) is None:
            raise NotFound(f"no item {item_id}")
        flag = Flag(caption_id=item_id, user_id=user.id, kind=kind, comment=comment)
        session.add(flag)
        session.flush()
        return {"id": flag.id, "item_id": item_id, "kind": kind, "comment": comment,
                "user": user.name, "at": flag.created_at.isoformat() + "Z"}

    return store.run_write(work)
