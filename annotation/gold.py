"""Gold labels with their history: every write goes through `write_gold`,
which keeps the labels it replaces as a `GoldRevision`."""
from __future__ import annotations

from sqlalchemy import func, select

from capscope.db import Caption, GoldLabel, GoldRevision, Store, User, utcnow


def write_gold(session, caption_id: int, token_labels: list, region_labels: list, source: str,
               adjudicator_id: int | None = None, token_confidence: list | None = None,
               region_confidence: list | None = None) -> GoldLabel:
    """Set a caption's gold labels (with the consensus's confidence in each, when
    measured) and record them as its next revision (nothing is recorded when
    labels, confidences and source are what they already are)."""
    # the caption's row lock serialises gold writers, also when no gold row exists yet
    session.get(Caption, caption_id, with_for_update=True)
    gold = session.get(GoldLabel, caption_id, populate_existing=True)
    unchanged = (gold is not None and gold.token_labels == list(token_labels)
                 and gold.region_labels == list(region_labels) and gold.source == source
                 and gold.token_confidence == token_confidence and gold.region_confidence == region_confidence)
    if gold is None:
        gold = GoldLabel(caption_id=caption_id, source=source)
        session.add(gold)
    gold.token_labels, gold.region_labels = list(token_labels), list(region_labels)
    gold.source, gold.adjudicator_id, gold.updated_at = source, adjudicator_id, utcnow()
    gold.token_confidence, gold.region_confidence = token_confidence, region_confidence
    if not unchanged:
        last = session.scalar(select(func.max(GoldRevision.revision)).where(GoldRevision.caption_id == caption_id))
        session.add(GoldRevision(caption_id=caption_id, revision=(last or 0) + 1, token_labels=gold.token_labels,
                                 region_labels=gold.region_labels, source=source, adjudicator_id=adjudicator_id,
                                 created_at=gold.updated_at, token_confidence=token_confidence,
                                 region_confidence=region_confidence))
    return gold


def gold_history(store: Store, caption_id: int) -> list[dict]:
    """Every gold label set of a caption, oldest first."""
    with store.read() as session:
        rows = session.execute(
            select(GoldRevision, User.name).outerjoin(User, User.id == GoldRevision.adjudicator_id)
            .where(GoldRevision.caption_id == caption_id).order_by(GoldRevision.revision)
        ).all()
        return [{"revision": r.revision, "source": r.source, "adjudicator": name, "token_labels": r.token_labels,
                 "region_labels": r.region_labels, "token_confidence": r.token_confidence,
                 "region_confidence": r.region_confidence, "created_at": r.created_at.isoformat() + "Z"}
                for r, name in rows]
