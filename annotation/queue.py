"""The order of a dataset's annotation queue: which eligible item `next_item`
hands out first. An admin picks one per dataset:

- `sequential`: caption id order (the default, and the order before there was a choice).
- `random`: a fixed permutation: each caption's rank is a hash of the seed and
  its external id, so the same seed gives the same order on SQLite and
  PostgreSQL, and captions added later fall into place without moving the others.
- `uncertainty`: the items whose word and region verdicts sit closest to the
  decision threshold under the stored model predictions first (`item_uncertainty`:
  the mean entropy of the verdicts under the token rule, annotation/uncertainty.py),
  one caption per image per round (`interleave_by_image`), so that one image's
  captions never come all in a row. Items without a prediction come last, by id.
- `consensus`: the items whose gold is least confident first (the lowest
  confidence of any of its labels, written by `capscope gold --method`), for
  re-labelling; items without a measured confidence come after, by id.
- `disagreement`: the items whose submitted judgements split on some token or
  region first, most disputed units first (the measure of the Explore list's
  disagreement column: a unit is disputed when some but not all judgements flag
  it); then items nobody has labelled, then the rest, each by id. Read from the
  labels at every claim, so it follows the labels as they come in.

Random and uncertainty ranks are stored on the captions (`Caption.queue_rank`,
lowest first) by `set_queue_order` and `refresh_queue`. A caption imported
afterwards has no rank: it comes after the ranked ones (by id) until the next
`refresh_queue`, which ranks it. Leases, `annotators_needed`, skips and
`previous_item` are untouched: the order only decides which eligible caption
is claimed first.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import datetime

from sqlalchemy import Float, and_, bindparam, case, cast, distinct, exists, func, literal, or_, select, update
from sqlalchemy.orm import aliased

from capscope.annotation import audit
from capscope.annotation.refusals import Invalid, NotFound
from capscope.annotation.uncertainty import prediction_uncertainty
from capscope.annotation.users import UserInfo
from capscope.db import Assignment, Caption, Dataset, GoldLabel, Label, Prediction, Store, Token, utcnow
from capscope.metrics.registry import SPECS

ORDERS = ("sequential", "random", "uncertainty", "disagreement", "consensus")
RANKED = ("random", "uncertainty", "consensus")  # orders kept as stored ranks
PREFERRED_METRIC = "infometic"
MAX_SEED = 2**31 - 1  # the column is a 32-bit integer on PostgreSQL
PREVIEW = 10
DEMO_DATASET = "demo"  # the demo world's items, seeded on a first start (ui/page.py)
CHUNK = 200  # ranks written per transaction


# ---------------------------------------------------------------- who may be given what

def holds_slot(now: datetime):
    """SQL condition: this assignment occupies one of its caption's slots (a draft a reviewer
    sent back keeps its slot, however long its annotator takes; annotation/review.py)."""
    return or_(Assignment.status == "submitted",
               and_(Assignment.status == "draft",
                    or_(Assignment.lease_expires_at > now, Assignment.review_status == "returned")))


def candidate_captions(user: UserInfo | None, dataset: str | None, now: datetime, order: str | None = "sequential"):
    """Caption ids this user may be given next: never theirs before, with a free
    slot (any user's when `user` is None); in queue `order` (see `order_keys`;
    None: each caption's dataset's own)."""
    taken = (select(func.count()).select_from(Assignment)
             .where(Assignment.caption_id == Caption.id, holds_slot(now))
             .correlate(Caption).scalar_subquery())
    free = [taken < Caption.annotators_needed, Caption.control.is_(False)]  # controls: `control_for`
    if user is not None:
        free.insert(0, ~exists().where(Assignment.caption_id == Caption.id, Assignment.user_id == user.id))
    if dataset is not None:
        return (select(Caption.id).where(*free).order_by(*order_keys(order))
                .where(Caption.dataset_id == select(Dataset.id).where(Dataset.name == dataset).scalar_subquery()))
    return select(Caption.id).where(*free).order_by(demo_last(), *order_keys(order))


def demo_last():
    """SQL, correlated to Caption: 1 for the demo world's dataset, else 0: without a chosen
    dataset, a user's own data comes before the 48 demo items."""
    name = select(Dataset.name).where(Dataset.id == Caption.dataset_id).correlate(Caption).scalar_subquery()
    return case((name == DEMO_DATASET, 1), else_=0)


def control_for(session, user: UserInfo, caption_id: int) -> int | None:
    """A control to hand `user` instead of `caption_id`, the next item of their
    queue, or None. A control is handed out with the probability of the caption's
    dataset's control rate, drawn from a hash of the user and how many items of
    the dataset they were handed: reproducible, and no pattern an annotator could
    see. Controls have no slots: each goes once to every annotator."""
    found = session.execute(select(Caption.dataset_id, Dataset.control_rate)
                            .join(Dataset, Caption.dataset_id == Dataset.id).where(Caption.id == caption_id)).one_or_none()
    if found is None or not found[1]:
        return None
    dataset_id, rate = found
    handed = session.scalar(select(func.count()).select_from(Assignment)
                            .join(Caption, Assignment.caption_id == Caption.id)
                            .where(Assignment.user_id == user.id, Caption.dataset_id == dataset_id))
    if random_rank(user.id, f"control:{dataset_id}:{handed}") >= rate:
        return None
    unseen = ~exists().where(Assignment.caption_id == Caption.id, Assignment.user_id == user.id)
    return session.scalar(select(Caption.id).where(Caption.dataset_id == dataset_id, Caption.control.is_(True), unseen)
                          .order_by(Caption.id).limit(1))


def check_order(order) -> str:
    if order not in ORDERS:
        raise Invalid(f"queue order must be one of {', '.join(ORDERS)}, got {order!r}")
    return order


def check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise Invalid(f"queue seed must be an integer from 0 to {MAX_SEED}, got {seed!r}")
    return seed


# ---------------------------------------------------------------- setting the order

def set_queue_order(store: Store, dataset: str, order: str, seed: int = 0,
                    model_version: str | None = None, *, token_rule: str) -> dict:
    """Give `dataset` this queue order and seed and rank its captions for it
    (random: by the seed; uncertainty: by the predictions of `model_version`,
    else each caption's newest, with words judged by `token_rule`). Returns `queue_view`."""
    check_order(order)
    check_seed(seed)

    def work(session):
        row = _locked_dataset(session, dataset)
        row.queue_order, row.queue_seed = order, seed
        audit.record_in(session, "queue order set", target=dataset, details={"order": order, "seed": seed})

    store.run_write(work)
    _write_ranks(store, dataset, model_version, token_rule)
    return queue_view(store, dataset)


def refresh_queue(store: Store, dataset: str, model_version: str | None = None, *, token_rule: str) -> dict:
    """Rank the dataset's captions again under its current order: after new
    predictions (uncertainty) or new captions (random, uncertainty), words judged
    by `token_rule`. Returns `queue_view`."""
    _write_ranks(store, dataset, model_version, token_rule)
    return queue_view(store, dataset)


def queue_view(store: Store, dataset: str, limit: int = PREVIEW, now: datetime | None = None) -> dict:
    """{"dataset", "order", "seed", "ranked": captions with a stored rank,
    "next": the first `limit` item ids the queue would hand out now (to an
    annotator who has none of them yet)}."""
    with store.read() as session:
        row = session.scalar(select(Dataset).where(Dataset.name == dataset))
        if row is None:
            raise NotFound(f"no dataset {dataset!r}")
        ranked = session.scalar(select(func.count()).select_from(Caption)
                                .where(Caption.dataset_id == row.id, Caption.queue_rank.is_not(None)))
        upcoming = candidate_captions(None, dataset, now or utcnow(), row.queue_order).limit(limit)
        return {"dataset": row.name, "order": row.queue_order, "seed": row.queue_seed, "ranked": ranked,
                "next": list(session.scalars(upcoming))}


def _locked_dataset(session, name: str) -> Dataset:
    row = session.scalar(select(Dataset).where(Dataset.name == name).with_for_update())
    if row is None:
        raise NotFound(f"no dataset {name!r}")
    return row


def _write_ranks(store: Store, dataset: str, model_version: str | None, token_rule: str) -> None:
    """Compute the ranks from a read, then write the ones that change, CHUNK
    captions per transaction: a claim meanwhile (which skips locked captions
    on PostgreSQL) never finds the whole dataset locked. A chunk stops the
    work when the order or seed changed since (a later call ranks for it)."""
    with store.read() as session:
        row = session.scalar(select(Dataset).where(Dataset.name == dataset))
        if row is None:
            raise NotFound(f"no dataset {dataset!r}")
        dataset_id, setting = row.id, (row.queue_order, row.queue_seed)
        current = dict(session.execute(select(Caption.id, Caption.queue_rank)
                                       .where(Caption.dataset_id == dataset_id)).all())
        wanted = _ranks(session, row, model_version, token_rule)
    changed = [{"caption": caption_id, "rank": wanted.get(caption_id)} for caption_id in sorted(current)
               if wanted.get(caption_id) != current[caption_id]]
    table = Caption.__table__
    statement = update(table).where(table.c.id == bindparam("caption")).values(queue_rank=bindparam("rank"))

    def write(session, chunk) -> bool:
        now = session.execute(select(Dataset.queue_order, Dataset.queue_seed).where(Dataset.id == dataset_id)
                              .with_for_update()).one_or_none()
        if now is None or tuple(now) != setting:
            return False
        session.execute(statement, chunk)
        return True

    for start in range(0, len(changed), CHUNK):
        if not store.run_write(lambda session, chunk=changed[start:start + CHUNK]: write(session, chunk)):
            break


def _ranks(session, dataset: Dataset, model_version: str | None, token_rule: str) -> dict[int, float]:
    """caption id -> rank under the dataset's order (captions left out: no rank)."""
    if dataset.queue_order == "random":
        captions = session.execute(select(Caption.id, Caption.external_id).where(Caption.dataset_id == dataset.id))
        return {caption_id: random_rank(dataset.queue_seed, external_id) for caption_id, external_id in captions}
    if dataset.queue_order == "uncertainty":
        ordered = interleave_by_image(_uncertainties(session, dataset.id, model_version, token_rule))
        return {caption_id: float(place) for place, caption_id in enumerate(ordered)}
    if dataset.queue_order == "consensus":
        return _least_confident(session, dataset.id)
    return {}


def open_relabel_slots(store: Store, dataset: str, below: float) -> int:
    """Give one more annotator slot to every item (not a control) whose least confident
    gold label is under `below`, so that the consensus order can hand it out again.
    Returns how many items were given one."""
    if isinstance(below, bool) or not isinstance(below, (int, float)) or not 0 < below <= 1:
        raise Invalid(f"the confidence to re-label under must be a number above 0 and at most 1, got {below!r}")

    def work(session):
        ranks = _least_confident(session, _locked_dataset(session, dataset).id)
        chosen = [caption_id for caption_id, lowest in ranks.items() if lowest < below]
        for start in range(0, len(chosen), CHUNK):
            session.execute(update(Caption).where(Caption.id.in_(chosen[start:start + CHUNK]))
                            .values(annotators_needed=Caption.annotators_needed + 1))
        return len(chosen)

    return store.run_write(work)


def _least_confident(session, dataset_id: int) -> dict[int, float]:
    """caption id -> the lowest confidence of its gold labels (a consensus method's, annotation/consensus.py):
    re-labelling hands out first the items whose consensus is least sure. Gold without confidence: no rank."""
    rows = session.execute(select(GoldLabel.caption_id, GoldLabel.token_confidence, GoldLabel.region_confidence)
                           .join(Caption, GoldLabel.caption_id == Caption.id)
                           .where(Caption.dataset_id == dataset_id, Caption.control.is_(False)))
    ranks = {}
    for caption_id, tokens, regions in rows:
        known = [value for value in (tokens or []) + (regions or []) if value is not None]
        if known:
            ranks[caption_id] = float(min(known))
    return ranks


# ---------------------------------------------------------------- ranks

def random_rank(seed: int, external_id: str) -> float:
    """A caption's place in the seed's permutation, in [0, 1): the first 52
    bits of sha256("seed:id"), exact in a double on every database."""
    digest = hashlib.sha256(f"{seed}:{external_id}".encode("utf-8")).hexdigest()
    return int(digest[:13], 16) / 16**13


def item_uncertainty(metric: str, token_scores: list | None, region_scores: list | None, *, token_rule: str,
                     word_scale: float, stored: float | None = None, semantic: list[bool] | None = None
                     ) -> float | None:
    """How unsure a prediction is of its word and region verdicts under `token_rule`
    (words times `word_scale`), 0..1 (1 = a coin toss; annotation/uncertainty.py);
    the stored value when it has no scores."""
    found = prediction_uncertainty(metric, token_scores, region_scores, semantic, token_rule, word_scale)
    return found if found is not None else stored


def _metric_preference(metric: str) -> int:
    """0: InfoMetIC; 1: its family (InfoCLIP, ...); 2: any other metric."""
    if metric == PREFERRED_METRIC:
        return 0
    spec = SPECS.get(metric)
    return 1 if spec is not None and spec.follows_token_rule else 2


def _uncertainties(session, dataset_id: int, model_version: str | None,
                   token_rule: str) -> list[tuple[int, int, float]]:
    """(caption id, image id, uncertainty) of every caption that has a usable
    prediction: of `model_version` when given, else the newest; InfoMetIC's
    first, then its family's, then any metric's with an uncertainty."""
    query = (select(Prediction.caption_id, Caption.image_id, Prediction.metric, Prediction.token_scores,
                    Prediction.region_scores, Prediction.uncertainty, Prediction.word_scale, Prediction.created_at,
                    Prediction.id)
             .join(Caption, Prediction.caption_id == Caption.id).where(Caption.dataset_id == dataset_id))
    if model_version is not None:
        query = query.where(Prediction.model_version == model_version)
    semantic = _semantic_flags(session, dataset_id)
    best: dict[int, tuple] = {}
    for caption_id, image_id, metric, tokens, regions, stored, scale, created, prediction_id in session.execute(
            query.execution_options(yield_per=1000)):
        preference = _metric_preference(metric)
        value = (item_uncertainty(metric, tokens, regions, token_rule=token_rule, word_scale=scale or 1.0,
                                  stored=stored, semantic=semantic.get(caption_id))
                 if preference < 2 or stored is not None else None)
        if value is None:
            continue
        key = (-preference, created, prediction_id)  # the largest wins
        if caption_id not in best or key > best[caption_id][0]:
            best[caption_id] = (key, image_id, value)
    return [(caption_id, image_id, value) for caption_id, (_, image_id, value) in best.items()]


def _semantic_flags(session, dataset_id: int) -> dict[int, list[bool]]:
    """caption id -> its tokens' semantic flags, in token order."""
    flags: dict[int, list[bool]] = defaultdict(list)
    rows = session.execute(select(Token.caption_id, Token.semantic).join(Caption, Token.caption_id == Caption.id)
                           .where(Caption.dataset_id == dataset_id).order_by(Token.caption_id, Token.index)
                           .execution_options(yield_per=5000))
    for caption_id, semantic in rows:
        flags[caption_id].append(semantic)
    return flags


def interleave_by_image(scored: list[tuple[int, int, float]]) -> list[int]:
    """Caption ids, most uncertain first, one caption per image per round: an
    image's second caption comes only after every other image's first, its
    third after every other image's second, and so on; ties by caption id."""
    by_image: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for caption_id, image_id, value in scored:
        by_image[image_id].append((-value, caption_id))
    rounds: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for captions in by_image.values():
        for place, key in enumerate(sorted(captions)):
            rounds[place].append(key)
    return [caption_id for place in sorted(rounds) for _, caption_id in sorted(rounds[place])]


# ---------------------------------------------------------------- the order in SQL

def queue_order_of(session, dataset: str | None) -> str | None:
    """The order to claim by: the dataset's; without a dataset, the one order
    every dataset has, else None (each caption by its own dataset's order)."""
    if dataset is not None:
        return session.scalar(select(Dataset.queue_order).where(Dataset.name == dataset)) or "sequential"
    orders = set(session.scalars(select(Dataset.queue_order).distinct()))
    return orders.pop() if len(orders) == 1 else ("sequential" if not orders else None)


def disputed_units():
    """SQL, correlated to Caption: how many of its tokens and regions some but
    not all submitted judgements flagged (the Explore list's disagreement)."""
    label, judgement, other, others_label = aliased(Label), aliased(Assignment), aliased(Assignment), aliased(Label)
    unit = label.index * 2 + case((label.kind == "region", 1), else_=0)
    someone_did_not = (exists().where(other.caption_id == label.caption_id, other.status == "submitted",
                                      ~exists().where(others_label.assignment_id == other.id,
                                                      others_label.kind == label.kind,
                                                      others_label.index == label.index).correlate(label, other))
                       .correlate(label))
    return (select(func.count(distinct(unit))).select_from(label).join(judgement, label.assignment_id == judgement.id)
            .where(label.caption_id == Caption.id, judgement.status == "submitted", someone_did_not)
            .correlate(Caption).scalar_subquery())


def _labelled():
    """SQL, correlated to Caption: 1 when someone submitted a judgement of it, else 0."""
    submitted = exists().where(Assignment.caption_id == Caption.id, Assignment.status == "submitted")
    return case((submitted.correlate(Caption), 1), else_=0)


def order_keys(order: str | None) -> list:
    """ORDER BY for the candidate captions under `order`; None: each caption
    under its own dataset's order, datasets one after another (by dataset id)."""
    if order in RANKED:
        return [Caption.queue_rank.asc().nulls_last(), Caption.id]
    if order == "disagreement":
        return [disputed_units().desc(), _labelled(), Caption.id]
    if order is not None:
        return [Caption.id]
    own = (select(Dataset.queue_order).where(Dataset.id == Caption.dataset_id)
           .correlate(Caption).scalar_subquery())
    disputed = disputed_units()
    ranked = own.in_(RANKED)
    tier = case((own == "disagreement", case((disputed > 0, 0), else_=1 + _labelled())),
                (ranked & Caption.queue_rank.is_(None), 1), else_=0)
    key = case((own == "disagreement", cast(-disputed, Float)),
               (ranked, func.coalesce(Caption.queue_rank, 0.0)), else_=literal(0.0))
    return [Caption.dataset_id, tier, key, Caption.id]
