"""An item as clients see it: the caption, its tokens and regions, the user's labels,
where review stands, a control's answer, stored model predictions and the revisions."""
from __future__ import annotations

from sqlalchemy import select

from capscope.annotation.revisions import LabelState, current_state, head_revision
from capscope.db import Assignment, Caption, GoldLabel, LabelRevision, Prediction, Region


def image_url(image_id: int) -> str:
    return f"/api/images/{image_id}"


# ---------------------------------------------------------------- queue

def item_view(session, assignment: Assignment | None, caption: Caption | None = None,
              include_predictions: bool = False) -> dict:
    """Everything a client needs to show an item, with the user's current labels."""
    caption = caption or assignment.caption
    image = caption.image
    regions = session.scalars(select(Region).where(Region.image_id == image.id).order_by(Region.index)).all()
    view = {
        "item_id": caption.id,
        "id": caption.external_id,
        "dataset": caption.dataset.name,
        "image_id": image.id,
        "image_url": image_url(image.id),
        "width": image.width,
        "height": image.height,
        "caption": caption.text,
        "references": caption.references,
        "tokens": [{"text": t.text, "start": t.start, "end": t.end, "semantic": t.semantic}
                   for t in caption.tokens],
        "regions": [region_view(r) for r in regions],
        "labels": labels_view(session, assignment) if assignment else None,
        "review": review_state(assignment),
        "answer": control_answer(session, assignment, caption),
    }
    if include_predictions:
        view["predictions"] = predictions_of(session, caption.id)
    return view


def control_answer(session, assignment: Assignment | None, caption: Caption) -> dict | None:
    """The gold of a control its annotator has submitted, where the dataset shows answers
    (annotation/controls.py); None otherwise, so nothing before a submit tells a control apart."""
    if assignment is None or assignment.status != "submitted" or not caption.control \
            or not caption.dataset.show_control_answers:
        return None
    gold = session.get(GoldLabel, caption.id)
    return None if gold is None else {"token_labels": gold.token_labels, "region_labels": gold.region_labels}


def review_state(assignment: Assignment | None) -> dict | None:
    """Where the assignment's judgement stands in review (None: not under review): its
    status (pending, accepted, corrected, returned), the reviewer's comment and name."""
    if assignment is None or assignment.review_status is None:
        return None
    return {"status": assignment.review_status, "comment": assignment.review_comment,
            "reviewer": assignment.reviewer,
            "reviewed_at": None if assignment.reviewed_at is None else assignment.reviewed_at.isoformat() + "Z"}


def region_view(region: Region) -> dict:
    """A region as clients get it; `removed` (None, or when, by whom and how it was taken
    away: annotation/removed_regions.py) says it is no longer to be drawn or labelled."""
    removed = None if region.removed_at is None else {
        "at": region.removed_at.isoformat() + "Z", "by": region.removed_by, "how": region.removed_how}
    return {"index": region.index, "box": region.box, "confidence": region.confidence, "source": region.source,
            "added_by": region.added_by, "mask": region.mask_rle,
            "created_at": None if region.created_at is None else region.created_at.isoformat() + "Z",
            "removed": removed}


def labels_view(session, assignment: Assignment, known: tuple[LabelState, bool] | None = None) -> dict:
    """The assignment's label state; `known` = (state, can_undo) when the caller has them."""
    if known is None:
        state = current_state(session, assignment)
        head = head_revision(session, assignment)
        can_undo = head is not None and head.undo_to is not None
    else:
        state, can_undo = known
    return {
        "item_id": assignment.caption_id,
        "incorrect_tokens": sorted(state.tokens),
        "mentioned_regions": sorted(state.regions),
        "junk_regions": sorted(state.junk),
        "links": [list(pair) for pair in sorted(state.links)],
        "status": assignment.status,
        "revision": assignment.revision,
        "can_undo": can_undo,
        "saved_at": assignment.updated_at.isoformat() + "Z",
        "lease_expires_at": assignment.lease_expires_at.isoformat() + "Z",
        "time_spent_ms": assignment.time_spent_ms,
    }


def predictions_of(session, caption_id: int) -> list[dict]:
    rows = session.scalars(select(Prediction).where(Prediction.caption_id == caption_id)
                           .order_by(Prediction.metric, Prediction.created_at.desc()))
    return [{"metric": p.metric, "model_version": p.model_version, "scores": p.scores,
             "token_scores": p.token_scores, "region_scores": p.region_scores, "uncertainty": p.uncertainty,
             "word_scale": p.word_scale}
            for p in rows]


def revisions_view(session, assignment: Assignment) -> list[dict]:
    """Every revision of the assignment, oldest first: who took the step (`by`: the annotator,
    or a reviewer) and the reviewer's comment."""
    revisions = session.scalars(select(LabelRevision).where(LabelRevision.assignment_id == assignment.id)
                                .order_by(LabelRevision.revision))
    annotator = assignment.user.name
    return [{"revision": r.revision, "action": r.action, "status": r.status,
             "incorrect_tokens": r.incorrect_tokens, "mentioned_regions": r.mentioned_regions,
             "junk_regions": r.junk_regions or [], "links": r.links or [],
             "at": r.created_at.isoformat() + "Z", "by": r.actor or annotator, "comment": r.comment}
            for r in revisions]
