"""The review stage: a second pair of eyes on submitted judgements, per dataset.

An admin turns review on for a dataset (`set_review`). From then on a judgement
submitted there is "pending" (annotation/workflow.py) and does not count as a
vote for gold, agreement or export (annotation/votes.py) until a reviewer
decides on it (`decide`):

- accept: the annotator's labels stand ("accepted");
- correct: the labels become the reviewer's ("corrected"); the answer holds
  the change against the annotator's labels (`label_diff`);
- return: sent back with a comment (required): the judgement is a draft of
  its annotator's again ("returned"), keeps its slot in the queue, is handed
  back to them first and shows them the comment; once they submit it, it is
  pending again ("resubmitted").

Every step is a revision of the judgement's label history with who took it
(`actor`: the reviewer) and the comment, and each decision is in the audit log
("review decision"). Who may review: users with the role "reviewer" or
"admin", in datasets with review on, never their own judgements. Reviewers may
label items too, as annotators do. Judgements submitted before review was
turned on, and all of a dataset's judgements once it is turned off again, count
as unreviewed ones always did; turning it on again brings back the pending ones.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Iterable

from sqlalchemy import and_, func, or_, select

from capscope.annotation import audit, item_views, revisions, workflow
from capscope.annotation.refusals import Forbidden, Invalid, NotFound
from capscope.annotation.revisions import LabelState
from capscope.annotation.users import UserInfo
from capscope.db import Assignment, Caption, Dataset, Store, utcnow

REVIEW_ROLES = ("reviewer", "admin")
DECISIONS = ("accept", "correct", "return")
OUTCOMES = {"accept": "accepted", "correct": "corrected", "return": "returned"}
MAX_COMMENT_CHARS = 2000
PARTS = ("incorrect_tokens", "mentioned_regions", "junk_regions", "links")


def may_review(user: UserInfo) -> bool:
    return user.role in REVIEW_ROLES


def check_reviewer(user: UserInfo) -> None:
    if not may_review(user):
        raise Forbidden("reviewing needs the reviewer or admin role")


# ---------------------------------------------------------------- the switch per dataset

def set_review(store: Store, user: UserInfo, dataset: str, on: bool) -> dict:
    """Turn review on or off for `dataset` (admins only): {"dataset", "review"}."""
    if not user.is_admin:
        raise Forbidden("turning review on or off needs the admin role")
    if not isinstance(on, bool):
        raise Invalid(f"review must be true or false, got {on!r}")

    def work(session):
        row = session.scalar(select(Dataset).where(Dataset.name == dataset).with_for_update())
        if row is None:
            raise NotFound(f"no dataset {dataset!r}")
        row.review = on
        audit.record_in(session, "review set", actor=user.name, target=dataset, details={"review": on})
        return {"dataset": row.name, "review": bool(row.review)}

    return store.run_write(work)


def review_settings(store: Store) -> list[dict]:
    """Every dataset: {"dataset", "review", "pending", "returned"} (judgements waiting for a
    reviewer, and drafts sent back to their annotators)."""
    waiting = or_(and_(Assignment.status == "submitted", Assignment.review_status == "pending"),
                  and_(Assignment.status == "draft", Assignment.review_status == "returned"))
    with store.read() as session:
        counts = {(dataset_id, state): n for dataset_id, state, n in session.execute(
            select(Caption.dataset_id, Assignment.review_status, func.count())
            .join(Caption, Assignment.caption_id == Caption.id).where(waiting)
            .group_by(Caption.dataset_id, Assignment.review_status))}
        rows = session.execute(select(Dataset.id, Dataset.name, Dataset.review).order_by(Dataset.name)).all()
        return [{"dataset": name, "review": bool(on), "pending": counts.get((dataset_id, "pending"), 0),
                 "returned": counts.get((dataset_id, "returned"), 0)} for dataset_id, name, on in rows]


# ---------------------------------------------------------------- the reviewer's queue

def _pending(user: UserInfo, dataset: str | None):
    query = (select(Assignment).join(Caption, Assignment.caption_id == Caption.id)
             .join(Dataset, Caption.dataset_id == Dataset.id)
             .where(Assignment.status == "submitted", Assignment.review_status == "pending", Dataset.review,
                    Assignment.user_id != user.id))
    return query if dataset is None else query.where(Dataset.name == dataset)


def next_for_review(store: Store, user: UserInfo, dataset: str | None = None,
                    after: int | None = None) -> dict | None:
    """The judgement this reviewer should look at now: the pending one submitted first (in
    `dataset`, else in any dataset with review on), never one of their own; with `after` (an
    assignment id), the first one after it in that order. None when there is none."""
    check_reviewer(user)
    with store.read() as session:
        query = _pending(user, dataset)
        if after is not None:
            mark = session.get(Assignment, after)
            if mark is not None and mark.submitted_at is not None:
                query = query.where(or_(Assignment.submitted_at > mark.submitted_at,
                                        and_(Assignment.submitted_at == mark.submitted_at, Assignment.id > mark.id)))
        found = session.scalar(query.order_by(Assignment.submitted_at, Assignment.id).limit(1))
        return None if found is None else review_view(session, found)


def pending_count(store: Store, user: UserInfo, dataset: str | None = None) -> int:
    """How many judgements wait for this reviewer (their own left out)."""
    check_reviewer(user)
    with store.read() as session:
        return session.scalar(select(func.count()).select_from(_pending(user, dataset).subquery()))


def get_review(store: Store, user: UserInfo, assignment_id: int) -> dict:
    """One judgement as a reviewer sees it (any review state), with its history."""
    check_reviewer(user)
    with store.read() as session:
        assignment = session.get(Assignment, assignment_id)
        _check_allowed(session, user, assignment, assignment_id)
        return review_view(session, assignment)


def review_view(session, assignment: Assignment) -> dict:
    """The item with the annotator's labels (`labels`), who they are, where the judgement
    stands in review (`review`), its history (every step, who took it, the comments) and,
    for a judgement submitted again after a return, what the annotator changed since."""
    view = item_views.item_view(session, assignment)
    history = item_views.revisions_view(session, assignment)
    returned = next((h for h in reversed(history) if h["action"] == "returned"), None)
    since = None
    if returned is not None and assignment.status == "submitted":
        since = label_diff(_history_state(returned), revisions.current_state(session, assignment))
    return {**view, "assignment_id": assignment.id, "annotator": assignment.user.name,
            "submitted_at": None if assignment.submitted_at is None else assignment.submitted_at.isoformat() + "Z",
            "history": history, "since_returned": since}


def _history_state(row: dict) -> LabelState:
    return LabelState(frozenset(row["incorrect_tokens"]), frozenset(row["mentioned_regions"]), row["status"],
                      frozenset(row["junk_regions"]), frozenset(tuple(p) for p in row["links"]))


def _check_allowed(session, user: UserInfo, assignment: Assignment | None, assignment_id: int) -> None:
    """403 unless this user may review this judgement: review on in its dataset, not their own."""
    if assignment is None:
        raise NotFound(f"no judgement {assignment_id}")
    dataset = assignment.caption.dataset
    if not dataset.review:
        raise Forbidden(f"review is off for dataset {dataset.name!r}: its judgements are not reviewed")
    if assignment.user_id == user.id:
        raise Forbidden("you cannot review your own judgement")


# ---------------------------------------------------------------- decisions

def label_diff(before: LabelState, after: LabelState) -> dict:
    """What changed from `before` to `after`, per part: {"added": [...], "removed": [...]}
    (links as [token, region] pairs); parts without a change are left out."""
    diff = {}
    for part, old, new in zip(PARTS, (before.tokens, before.regions, before.junk, before.links),
                              (after.tokens, after.regions, after.junk, after.links)):
        added, removed = sorted(new - old), sorted(old - new)
        if added or removed:
            diff[part] = {"added": [list(x) if isinstance(x, tuple) else x for x in added],
                          "removed": [list(x) if isinstance(x, tuple) else x for x in removed]}
    return diff


def checked_comment(comment, required: bool) -> str | None:
    text = "" if comment is None else comment
    if not isinstance(text, str):
        raise Invalid("a review comment must be text")
    text = text.strip()
    if len(text) > MAX_COMMENT_CHARS:
        raise Invalid(f"a review comment has at most {MAX_COMMENT_CHARS} characters, this one {len(text)}")
    if required and not text:
        raise Invalid("sending a judgement back needs a comment: say what to look at again")
    return text or None


def decide(store: Store, user: UserInfo, assignment_id: int, decision: str, comment: str | None = None, *,
           incorrect_tokens: Iterable[int] | None = None, mentioned_regions: Iterable[int] | None = None,
           junk_regions: Iterable[int] | None = None, links: Iterable | None = None,
           lease_seconds: int = workflow.LEASE_SECONDS, now: datetime | None = None) -> dict:
    """A reviewer's decision on a pending judgement: "accept", "correct" (with the corrected
    parts of the labels; a part not given stays the annotator's) or "return" (with a comment).
    Refused, with nothing changed: not a reviewer or admin, review off in the dataset, their
    own judgement (403); not pending, an unknown decision, a return without a comment, a
    correction that changes nothing or out of range (422).
    Returns {"assignment_id", "item_id", "decision", "review", "labels", "diff"}."""
    check_reviewer(user)
    if decision not in DECISIONS:
        raise Invalid(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
    text = checked_comment(comment, required=decision == "return")
    corrected = (incorrect_tokens, mentioned_regions, junk_regions, links)
    if decision != "correct" and any(part is not None for part in corrected):
        raise Invalid(f"labels come only with the decision correct, not {decision}")
    if decision == "correct" and all(part is None for part in corrected):
        raise Invalid("a correction needs the corrected labels (incorrect_tokens, mentioned_regions, "
                      "junk_regions or links)")

    def work(session):
        current = now or utcnow()
        assignment = session.scalar(select(Assignment).where(Assignment.id == assignment_id).with_for_update())
        _check_allowed(session, user, assignment, assignment_id)
        if assignment.status != "submitted" or assignment.review_status != "pending":
            where = assignment.review_status or assignment.status
            raise Invalid(f"judgement {assignment_id} is not waiting for review (it is {where})")
        state = revisions.current_state(session, assignment)
        diff = None
        if decision == "correct":
            new = workflow.edited_state(session, assignment, state, *corrected)
            if new == state:
                raise Invalid("the correction changes nothing: accept the judgement instead")
            diff = label_diff(state, new)
            revisions.write_labels(session, assignment, state, new)
            assignment.updated_at = current  # the labels changed now: regions added later were not seen
            undo_to = None  # the annotator's undo does not take back a reviewer's correction
        elif decision == "return":
            new = LabelState(state.tokens, state.regions, "draft", state.junk, state.links)
            assignment.updated_at = current
            assignment.lease_expires_at = current + timedelta(seconds=lease_seconds)
            undo_to = revisions.head_undo_to(session, assignment)
        else:
            new = state
            undo_to = revisions.head_undo_to(session, assignment)
        outcome = OUTCOMES[decision]
        assignment.review_status, assignment.review_comment = outcome, text
        assignment.reviewer, assignment.reviewed_at = user.name, current
        revisions.append_revision(session, assignment, new, outcome, undo_to, current, actor=user.name, comment=text)
        details = {"decision": outcome, "judgement": assignment.id, "annotator": assignment.user.name,
                   "dataset": assignment.caption.dataset.name}
        if text:
            details["comment"] = text[:500]
        if diff:
            details["diff"] = diff
        audit.record_in(session, "review decision", target=f"item {assignment.caption_id}", details=details,
                        actor=user.name)
        return {"assignment_id": assignment.id, "item_id": assignment.caption_id, "decision": outcome,
                "review": item_views.review_state(assignment), "labels": item_views.labels_view(session, assignment),
                "diff": diff}

    return store.run_write(work)


def returned_to(store: Store, user: UserInfo) -> list[dict]:
    """The judgements reviewers sent back to this user, still to be submitted again:
    [{"item_id", "dataset", "comment", "reviewer", "returned_at"}], oldest first."""
    with store.read() as session:
        rows = session.execute(
            select(Assignment.caption_id, Dataset.name, Assignment.review_comment, Assignment.reviewer,
                   Assignment.reviewed_at)
            .join(Caption, Assignment.caption_id == Caption.id).join(Dataset, Caption.dataset_id == Dataset.id)
            .where(Assignment.user_id == user.id, Assignment.status == "draft",
                   Assignment.review_status == "returned")
            .order_by(Assignment.reviewed_at, Assignment.id)).all()
        return [{"item_id": item_id, "dataset": dataset, "comment": comment, "reviewer": reviewer,
                 "returned_at": None if at is None else at.isoformat() + "Z"}
                for item_id, dataset, comment, reviewer, at in rows]

