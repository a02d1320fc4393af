"""Taking a region away: undone or withdrawn by the one who added it, removed by an admin.

A region is never deleted: labels, ties, gold and predictions name regions by
their index, so a region taken away keeps its row and its index, marked with
when, by whom and how. What changes with it:
- every vote on it goes (mentioned, junk, ties), in every judgement of every
  caption of its image; each judgement that had one gets a revision saying so,
  taken by whoever took the region away;
- gold on it becomes no label (a new gold revision keeps the old one);
- it is no longer drawn, offered or exported, and no new label may name it.

The one who added a region may take it back while no one else has voted on
it: by undo (the add is a step of their undo history) or by withdrawing it.
An admin may remove any region, votes and all.
"""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, exists, or_, select

from capscope.annotation import audit
from capscope.annotation.access import item_image
from capscope.annotation.refusals import Forbidden, Invalid, NotFound
from capscope.annotation.revisions import append_revision, current_state, head_undo_to
from capscope.annotation.users import UserInfo
from capscope.db import Assignment, Caption, GoldLabel, Label, Link, Region, Store, utcnow

REMOVED_HOW = ("undone", "withdrawn", "removed")


def removed_indices(session, caption_id: int) -> set[int]:
    """The indexes of the regions taken away from the item's image."""
    return set(session.scalars(select(Region.index).join(Caption, Caption.image_id == Region.image_id)
                               .where(Caption.id == caption_id, Region.removed_at.is_not(None))))


def _votes_on(image_id: int, index: int):
    """SQL conditions: a label or a tie on region `index` of the image (drafts included)."""
    on_image = select(Caption.id).where(Caption.image_id == image_id)
    label = (Label.caption_id.in_(on_image) & Label.kind.in_(("region", "junk")) & (Label.index == index))
    link = (Link.caption_id.in_(on_image) & (Link.region_index == index))
    return label, link


def voted_by_others(session, region: Region, user_id: int) -> bool:
    """Has anyone but this user labelled or tied the region (in any of its image's captions)?"""
    label, link = _votes_on(region.image_id, region.index)
    others = Assignment.user_id != user_id
    return bool(session.scalar(select(or_(
        exists().where(label, Label.assignment_id == Assignment.id, others),
        exists().where(link, Link.assignment_id == Assignment.id, others)))))


def take_away(session, region: Region, actor: str, how: str, now: datetime) -> int:
    """Mark the region taken away and drop every vote on it; the number of judgements changed."""
    if how not in REMOVED_HOW:
        raise ValueError(f"how must be one of {REMOVED_HOW}")
    region.removed_at, region.removed_by, region.removed_how = now, actor, how
    label, link = _votes_on(region.image_id, region.index)
    voters = set(session.scalars(select(Label.assignment_id).where(label))) | \
        set(session.scalars(select(Link.assignment_id).where(link)))
    changed = 0
    for assignment in session.scalars(select(Assignment).where(Assignment.id.in_(voters))
                                      .order_by(Assignment.id).with_for_update()):
        state = current_state(session, assignment)
        session.execute(delete(Label).where(Label.assignment_id == assignment.id, label)
                        .execution_options(synchronize_session=False))
        session.execute(delete(Link).where(Link.assignment_id == assignment.id, link)
                        .execution_options(synchronize_session=False))
        kept = state.without_regions({region.index})
        # not an undo step of the annotator's: their undo goes on from where it was
        append_revision(session, assignment, kept, "region removed", head_undo_to(session, assignment), now,
                        actor=None if assignment.user.name == actor else actor,
                        comment=f"region {region.index} {how}")
        changed += 1
    _clear_gold(session, region)
    return changed


def _clear_gold(session, region: Region) -> None:
    from capscope.annotation.gold import write_gold

    captions = select(Caption.id).where(Caption.image_id == region.image_id)
    for gold in session.scalars(select(GoldLabel).where(GoldLabel.caption_id.in_(captions))
                                .order_by(GoldLabel.caption_id)):
        regions, confidence = _without(gold.region_labels, region.index), _without(gold.region_confidence,
                                                                                   region.index)
        if gold.region_votes is not None:
            gold.region_votes = _without(gold.region_votes, region.index)
        if gold.link_votes:
            gold.link_votes = [entry for entry in gold.link_votes if entry["region"] != region.index]
        write_gold(session, gold.caption_id, gold.token_labels, regions, gold.source, gold.adjudicator_id,
                   gold.token_confidence, confidence)


def _without(values: list | None, index: int) -> list | None:
    """`values` with entry `index` made None (the list keeps its length: entries are by index)."""
    if values is None or index >= len(values):
        return values
    return [None if i == index else value for i, value in enumerate(values)]


def remove_region(store: Store, user: UserInfo, item_id: int, index: int, *, now: datetime | None = None) -> dict:
    """Take region `index` of the item's image away (REST DELETE .../regions/{index}): an admin
    removes any region, votes and all; the one who added a region withdraws it while no one
    else has voted on it. Returns {"index", "how", "judgements_changed"}."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise Invalid("a region index is an integer")

    def work(session):
        image = item_image(session, user, item_id)
        region = session.scalar(select(Region).where(Region.image_id == image.id, Region.index == index)
                                .with_for_update())
        if region is None:
            raise NotFound(f"item {item_id}'s image has no region {index}")
        if region.removed_at is not None:
            raise Invalid(f"region {index} was already taken away ({region.removed_how} by {region.removed_by})")
        if user.is_admin:
            how = "removed"
        elif region.added_by != user.name:
            raise Forbidden(f"region {index} was not added by you: an admin can remove it")
        elif voted_by_others(session, region, user.id):
            raise Invalid(f"others have labelled region {index}: it stays (an admin can remove it)")
        else:
            how = "withdrawn"
        changed = take_away(session, region, user.name, how, now or utcnow())
        audit.record_in(session, "region removed", target=f"image {image.id} region {index}",
                        details={"how": how, "item": item_id, "added_by": region.added_by, "box": region.box,
                                 "judgements_changed": changed})
        return {"index": index, "how": how, "judgements_changed": changed}

    return store.run_write(work)
