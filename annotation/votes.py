"""Votes per item from submitted assignments, majority labels, and a chunked
walk over items that export and agreement share (never the whole table in memory)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Iterator

from sqlalchemy import func, or_, select

from capscope.db import Assignment, Caption, Dataset, GoldLabel, Image, Label, Link, Region, Store, Token, User

CHUNK = 500


def majority(positive: int, total: int) -> bool | None:
    """Strict majority: True / False, None on a tie or without votes."""
    if total == 0 or 2 * positive == total:
        return None
    return 2 * positive > total


@dataclass
class Judgement:
    """One submitted assignment: who, and what they flagged."""
    user_id: int
    user: str
    submitted_at: object
    time_spent_ms: int
    incorrect_tokens: set[int] = field(default_factory=set)
    mentioned_regions: set[int] = field(default_factory=set)
    junk_regions: set[int] = field(default_factory=set)
    links: set[tuple[int, int]] = field(default_factory=set)
    updated_at: object = None  # the last label change: regions added later were not seen


def _entry(values: list | None, index: int):
    """values[index], None past the end (gold written before regions were added)."""
    return values[index] if values is not None and index < len(values) else None


@dataclass
class ItemData:
    caption_id: int
    external_id: str
    dataset: str
    text: str
    references: list
    image_id: int
    image_path: str
    width: int
    height: int
    tokens: list[dict]
    regions: list[dict]
    judgements: list[Judgement]
    gold: GoldLabel | None
    control: bool = False  # an item with gold the queue mixes in to measure annotators

    def token_votes(self, index: int) -> tuple[int, int]:
        """(incorrect, total) over the store's judgements and any imported votes."""
        positive = sum(index in j.incorrect_tokens for j in self.judgements)
        total = len(self.judgements)
        imported = _entry(self.gold.token_votes, index) if self.gold else None
        if imported:
            positive, total = positive + imported["incorrect"], total + imported["total"]
        return positive, total

    def region_seers(self, index: int) -> list[Judgement]:
        """The judgements made while region `index` existed (a proposal: all of them; a region
        taken away: none, its votes went with it)."""
        if self.regions[index].get("removed"):
            return []
        added = self.regions[index].get("created_at")
        return [j for j in self.judgements if added is None or j.updated_at is None or j.updated_at >= added]

    def region_votes(self, index: int) -> tuple[int, int]:
        """(mentioned, total) over the judgements that saw the region and any imported votes."""
        seers = self.region_seers(index)
        positive, total = sum(index in j.mentioned_regions for j in seers), len(seers)
        imported = _entry(self.gold.region_votes, index) if self.gold else None
        if imported:
            positive, total = positive + imported["mentioned"], total + imported["total"]
        return positive, total

    def junk_votes(self, index: int) -> int:
        """How many of those who saw the region called it no object (imported votes included)."""
        imported = _entry(self.gold.region_votes, index) if self.gold else None
        return sum(index in j.junk_regions for j in self.region_seers(index)) + ((imported or {}).get("junk") or 0)

    def is_junk(self, index: int) -> bool:
        return 2 * self.junk_votes(index) > self.region_votes(index)[1]

    def link_votes(self) -> list[dict]:
        """Every tie any annotator made: {"token", "region", "votes", "total"} (total: those who saw the region)."""
        counted: dict[tuple[int, int], list[int]] = {}
        for j in self.judgements:
            for pair in j.links:
                counted.setdefault(pair, [0, 0])
        for entry in (self.gold.link_votes or []) if self.gold else []:
            counted.setdefault((entry["token"], entry["region"]), [0, 0])
        for (token, region), tally in counted.items():
            if region >= len(self.regions):
                continue
            seers = self.region_seers(region)
            tally[0], tally[1] = sum((token, region) in j.links for j in seers), len(seers)
        for entry in (self.gold.link_votes or []) if self.gold else []:
            tally = counted[(entry["token"], entry["region"])]
            tally[0], tally[1] = tally[0] + entry["votes"], tally[1] + entry["total"]
        return [{"token": t, "region": r, "votes": v, "total": n} for (t, r), (v, n) in sorted(counted.items())
                if r < len(self.regions)]

    def gold_confidence(self) -> tuple[list, list]:
        """How sure the consensus was of each gold label the export gives (None: a label not from
        gold, or gold written without a measured confidence: imported, adjudicated, older)."""
        gold = self.gold
        if gold is None:
            return [None] * len(self.tokens), [None] * len(self.regions)
        tokens = [_entry(gold.token_confidence, i) if _entry(gold.token_labels, i) is not None else None
                  for i in range(len(self.tokens))]
        regions = [_entry(gold.region_confidence, i)
                   if _entry(gold.region_labels, i) is not None and self.region_label(i) == gold.region_labels[i]
                   else None for i in range(len(self.regions))]
        return tokens, regions

    def token_label(self, index: int) -> str | None:
        gold = _entry(self.gold.token_labels, index) if self.gold else None
        if gold is not None:
            return gold
        verdict = majority(*self.token_votes(index))
        return None if verdict is None else ("incorrect" if verdict else "correct")

    def region_label(self, index: int) -> str | None:
        """An adjudicated label; else None for a region most of those who saw it call junk;
        else imported gold, or the majority of those who saw it."""
        gold = _entry(self.gold.region_labels, index) if self.gold else None
        if gold is not None and self.gold.source == "adjudicated":
            return gold
        if self.is_junk(index):
            return None
        if gold is not None:
            return gold
        if self.too_few_seers(index):
            return None
        verdict = majority(*self.region_votes(index))
        return None if verdict is None else ("mentioned" if verdict else "unmentioned")

    def too_few_seers(self, index: int) -> bool:
        """A region added after the others judged the item is seen by fewer: its majority waits
        for two who saw it (one, on an item only one person judged), so that whoever adds a
        region late does not label it alone."""
        return len(self.region_seers(index)) < min(2, len(self.judgements))


def without_removed(item: ItemData) -> ItemData:
    """The item as exports give it: the regions taken away left out and the later ones numbered
    on from there, in the labels, ties and gold that name them (annotation/removed_regions.py).
    Labels are kept by stored index; only what leaves capscope is renumbered."""
    kept = [i for i, region in enumerate(item.regions) if not region.get("removed")]
    if len(kept) == len(item.regions):
        return item
    place = {index: position for position, index in enumerate(kept)}

    def judgement(j: Judgement) -> Judgement:
        return replace(j, mentioned_regions={place[i] for i in j.mentioned_regions if i in place},
                       junk_regions={place[i] for i in j.junk_regions if i in place},
                       links={(t, place[r]) for t, r in j.links if r in place})

    def by_place(values: list | None) -> list | None:
        return None if values is None else [values[i] if i < len(values) else None for i in kept]

    gold = item.gold
    if gold is not None:
        gold = SimpleNamespace(
            token_labels=gold.token_labels, token_votes=gold.token_votes, token_confidence=gold.token_confidence,
            region_labels=by_place(gold.region_labels), region_votes=by_place(gold.region_votes),
            region_confidence=by_place(gold.region_confidence), source=gold.source,
            link_votes=None if gold.link_votes is None else [
                {**entry, "region": place[entry["region"]]} for entry in gold.link_votes if entry["region"] in place])
    return replace(item, regions=[item.regions[i] for i in kept], judgements=[judgement(j) for j in item.judgements],
                   gold=gold)


def iter_exported_items(store: Store, dataset: str | None = None) -> Iterator[ItemData]:
    """`iter_items` as exports give them (`without_removed`)."""
    return (without_removed(item) for item in iter_items(store, dataset))


def caption_query(dataset: str | None = None):
    query = (select(Caption.id, Caption.external_id, Dataset.name, Caption.text, Caption.references,
                    Image.id, Image.path, Image.width, Image.height, Caption.control)
             .join(Dataset, Caption.dataset_id == Dataset.id)
             .join(Image, Caption.image_id == Image.id)
             .order_by(Caption.id))
    return query if dataset is None else query.where(Dataset.name == dataset)


def iter_items(store: Store, dataset: str | None = None, chunk: int | None = None) -> Iterator[ItemData]:
    """Every item with its tokens, regions, submitted judgements and gold, in id
    order, loaded `chunk` items at a time (the caption query is streamed with yield_per)."""
    with store.read() as session:
        result = session.execute(caption_query(dataset), execution_options={"yield_per": chunk or CHUNK})
        for rows in result.partitions():
            yield from _load_chunk(session, rows)


def load_item(store: Store, caption_id: int) -> ItemData | None:
    """One item with its tokens, regions, submitted judgements and gold; None when there is no such item."""
    with store.read() as session:
        rows = session.execute(caption_query().where(Caption.id == int(caption_id))).all()
        found = _load_chunk(session, rows)
    return found[0] if found else None


def _load_chunk(session, rows) -> list[ItemData]:
    caption_ids = [r[0] for r in rows]
    image_ids = list({r[5] for r in rows})
    tokens = defaultdict(list)
    for t in session.execute(select(Token.caption_id, Token.text, Token.start, Token.end, Token.semantic)
                             .where(Token.caption_id.in_(caption_ids)).order_by(Token.caption_id, Token.index)):
        tokens[t[0]].append({"text": t[1], "start": t[2], "end": t[3], "semantic": t[4]})
    regions = defaultdict(list)
    for r in session.scalars(select(Region).where(Region.image_id.in_(image_ids))
                             .order_by(Region.image_id, Region.index)):
        regions[r.image_id].append({"box": r.box, "mask": r.mask_rle, "confidence": r.confidence,
                                    "source": r.source, "added_by": r.added_by, "created_at": r.created_at,
                                    "removed": r.removed_at is not None})
    judgements = _judgements(session, caption_ids)
    golds = {g.caption_id: g for g in session.scalars(select(GoldLabel).where(GoldLabel.caption_id.in_(caption_ids)))}
    session.expunge_all()  # keep the identity map from growing over a long walk
    return [ItemData(r[0], r[1], r[2], r[3], r[4] or [], r[5], r[6], r[7], r[8], tokens[r[0]], regions[r[5]],
                     judgements.get(r[0], []), golds.get(r[0]), bool(r[9])) for r in rows]


def counts_as_vote():
    """SQL, on Assignment: a submitted judgement counts unless its dataset has review on and no
    reviewer has accepted or corrected it yet (annotation/review.py); unreviewed ones (review
    off, or submitted before it was turned on) count as they always did."""
    review_on = (select(Dataset.review).join(Caption, Caption.dataset_id == Dataset.id)
                 .where(Caption.id == Assignment.caption_id).correlate(Assignment).scalar_subquery())
    return or_(Assignment.review_status.is_(None), Assignment.review_status.in_(("accepted", "corrected")),
               ~review_on)


def _judgements(session, caption_ids: list[int]) -> dict[int, list[Judgement]]:
    by_assignment: dict[int, Judgement] = {}
    by_caption: dict[int, list[Judgement]] = defaultdict(list)
    rows = session.execute(
        select(Assignment.id, Assignment.caption_id, Assignment.user_id, User.name, Assignment.submitted_at,
               Assignment.time_spent_ms, Assignment.updated_at)
        .join(User, Assignment.user_id == User.id)
        .where(Assignment.caption_id.in_(caption_ids), Assignment.status == "submitted", counts_as_vote())
        .order_by(Assignment.caption_id, User.name))
    for assignment_id, caption_id, user_id, name, submitted_at, spent, updated_at in rows:
        judgement = Judgement(user_id, name, submitted_at, spent, updated_at=updated_at)
        by_assignment[assignment_id] = judgement
        by_caption[caption_id].append(judgement)
    if by_assignment:
        labels = session.execute(select(Label.assignment_id, Label.kind, Label.index)
                                 .where(Label.assignment_id.in_(list(by_assignment))))
        for assignment_id, kind, index in labels:
            target = by_assignment[assignment_id]
            {"token": target.incorrect_tokens, "region": target.mentioned_regions,
             "junk": target.junk_regions}[kind].add(index)
        links = session.execute(select(Link.assignment_id, Link.token_index, Link.region_index)
                                .where(Link.assignment_id.in_(list(by_assignment))))
        for assignment_id, token, region in links:
            by_assignment[assignment_id].links.add((token, region))
    return by_caption


def submitted_counts(session, caption_ids: list[int]) -> dict[int, int]:
    return dict(session.execute(
        select(Assignment.caption_id, func.count()).where(Assignment.caption_id.in_(caption_ids),
                                                          Assignment.status == "submitted")
        .group_by(Assignment.caption_id)).all())
