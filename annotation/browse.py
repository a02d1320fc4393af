"""Lists and progress for the UI and the REST API: items with filters, sorting
and paging (all in SQL, with per-item figures from grouped subqueries), the
choices for the filters, and how far each annotator and the whole team are."""
from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, exists, func, literal, or_, select

from capscope.annotation.refusals import Invalid
from capscope.annotation.queue import PREFERRED_METRIC, candidate_captions, holds_slot
from capscope.annotation.users import UserInfo
from capscope.db import Assignment, Caption, Dataset, Flag, GoldLabel, Label, Prediction, Store, User, utcnow

SORTS = ("id", "disagreement", "uncertainty", "submitted", "updated")
STATUS_FILTERS = ("all", "open", "complete", "in_progress", "gold", "no_gold", "flagged")
MAX_PAGE_SIZE = 500


def _item_figures(now: datetime):
    submitted = (select(Assignment.caption_id, func.count().label("n"), func.max(Assignment.updated_at).label("last"))
                 .where(Assignment.status == "submitted").group_by(Assignment.caption_id).subquery())
    active = (select(Assignment.caption_id, func.count().label("n"))
              .where(Assignment.status == "draft", Assignment.lease_expires_at > now)
              .group_by(Assignment.caption_id).subquery())
    votes = (select(Label.caption_id, Label.kind, Label.index, func.count().label("k"))
             .join(Assignment, Label.assignment_id == Assignment.id)
             .where(Assignment.status == "submitted")
             .group_by(Label.caption_id, Label.kind, Label.index).subquery())
    # a unit is disputed when some but not all submitted judgements flagged it
    disputed = (select(votes.c.caption_id, func.count().label("n"))
                .join(submitted, submitted.c.caption_id == votes.c.caption_id)
                .where(votes.c.k < submitted.c.n)
                .group_by(votes.c.caption_id).subquery())
    # the newest prediction's (InfoMetIC's first among one import's): what Annotate suggests from
    newest_first = (Prediction.created_at.desc(), case((Prediction.metric == PREFERRED_METRIC, 0), else_=1),
                    Prediction.id.desc())
    ranked = (select(Prediction.caption_id, Prediction.uncertainty.label("u"),
                     func.row_number().over(partition_by=Prediction.caption_id, order_by=newest_first).label("place"))
              .where(Prediction.uncertainty.is_not(None)).subquery())
    uncertainty = select(ranked.c.caption_id, ranked.c.u).where(ranked.c.place == 1).subquery()
    flags = select(Flag.caption_id, func.count().label("n")).group_by(Flag.caption_id).subquery()
    return submitted, active, disputed, uncertainty, flags


def list_items(store: Store, *, dataset: str | None = None, status: str = "all", search: str | None = None,
               sort: str = "id", descending: bool = False, page: int = 1, page_size: int = 50,
               annotator: str | None = None, score: tuple[str, str] | None = None,
               score_range: tuple[float | None, float | None] = (None, None),
               now: datetime | None = None) -> dict:
    """One page of items with their figures: submitted / needed judgements,
    annotators at work, disputed units (disagreement), model uncertainty, flags, gold.
    `annotator` keeps the items given to that user; `score` = (metric, key) adds that
    stored model score, sorts by it and keeps those inside `score_range`."""
    if sort not in SORTS:
        raise Invalid(f"sort must be one of {', '.join(SORTS)}")
    if status not in STATUS_FILTERS:
        raise Invalid(f"status must be one of {', '.join(STATUS_FILTERS)}")
    if page < 1 or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise Invalid(f"page must be >= 1 and page_size 1-{MAX_PAGE_SIZE}")
    submitted, active, disputed, uncertainty, flags = _item_figures(now or utcnow())
    n_submitted = func.coalesce(submitted.c.n, 0)
    columns = {
        "submitted": n_submitted,
        "in_progress": func.coalesce(active.c.n, 0),
        "disagreement": func.coalesce(disputed.c.n, 0),
        "uncertainty": uncertainty.c.u,
        "flags": func.coalesce(flags.c.n, 0),
        "has_gold": case((GoldLabel.caption_id.is_(None), literal(False)), else_=literal(True)),
    }
    query = (select(Caption.id, Caption.external_id, Dataset.name, Caption.text, Caption.image_id,
                    Caption.annotators_needed, *[c.label(k) for k, c in columns.items()])
             .join(Dataset, Caption.dataset_id == Dataset.id)
             .outerjoin(submitted, submitted.c.caption_id == Caption.id)
             .outerjoin(active, active.c.caption_id == Caption.id)
             .outerjoin(disputed, disputed.c.caption_id == Caption.id)
             .outerjoin(uncertainty, uncertainty.c.caption_id == Caption.id)
             .outerjoin(flags, flags.c.caption_id == Caption.id)
             .outerjoin(GoldLabel, GoldLabel.caption_id == Caption.id))
    query = _filtered(query, dataset, status, search, n_submitted, columns)
    if annotator:
        query = query.where(exists().where(Assignment.caption_id == Caption.id, Assignment.user_id == User.id,
                                           User.name == annotator))
    if score:
        value = _stored_score(*score)
        query = query.add_columns(value.label("score"))
        low, high = score_range
        if low is not None:
            query = query.where(value >= low)
        if high is not None:
            query = query.where(value <= high)
        order = func.coalesce(value, -1e9)
    else:
        order = {"id": Caption.id, "disagreement": columns["disagreement"], "submitted": n_submitted,
                 "uncertainty": func.coalesce(uncertainty.c.u, -1.0),
                 "updated": func.coalesce(submitted.c.last, Caption.created_at)}[sort]
    total = _count(store, query)
    query = query.order_by(order.desc() if descending else order.asc(), Caption.id)
    query = query.offset((page - 1) * page_size).limit(page_size)
    with store.read() as session:
        rows = session.execute(query).mappings().all()
    items = [{"item_id": r["id"], "id": r["external_id"], "dataset": r["name"], "caption": r["text"],
              "image_id": r["image_id"], "image_url": f"/api/images/{r['image_id']}",
              "needed": r["annotators_needed"], **{k: r[k] for k in columns},
              **({"score": r["score"]} if score else {})} for r in rows]
    for item in items:
        item["has_gold"] = bool(item["has_gold"])
    return {"total": total, "page": page, "page_size": page_size, "items": items}


def _stored_score(metric: str, key: str):
    """The highest stored `scores[key]` of a metric's predictions for the caption."""
    return (select(func.max(Prediction.scores[key].as_float()))
            .where(Prediction.caption_id == Caption.id, Prediction.metric == metric)
            .correlate(Caption).scalar_subquery())


def _filtered(query, dataset, status, search, n_submitted, columns):
    if dataset:
        query = query.where(Dataset.name == dataset)
    if search:
        query = query.where(or_(Caption.text.contains(search, autoescape=True), Caption.external_id == search))
    conditions = {
        "open": n_submitted < Caption.annotators_needed,
        "complete": n_submitted >= Caption.annotators_needed,
        "in_progress": columns["in_progress"] > 0,
        "gold": GoldLabel.caption_id.is_not(None),
        "no_gold": GoldLabel.caption_id.is_(None),
        "flagged": columns["flags"] > 0,
    }
    return query if status == "all" else query.where(conditions[status])


def _count(store: Store, query) -> int:
    with store.read() as session:
        return session.scalar(select(func.count()).select_from(query.subquery()))


def progress(store: Store, user: UserInfo | None = None, *, dataset: str | None = None,
             now: datetime | None = None) -> dict:
    """{"me": this user's counts (when a user is given), "everyone": the team's}."""
    now = now or utcnow()
    with store.read() as session:
        captions = select(Caption.id, Caption.annotators_needed)
        if dataset:
            captions = captions.join(Dataset, Caption.dataset_id == Dataset.id).where(Dataset.name == dataset)
        captions = captions.subquery()
        per_user = session.execute(
            select(User.name, Assignment.user_id,
                   func.sum(case((Assignment.status == "submitted", 1), else_=0)),
                   func.sum(case((Assignment.status == "skipped", 1), else_=0)),
                   func.sum(case((holds_slot(now) & (Assignment.status == "draft"), 1), else_=0)),
                   func.sum(Assignment.time_spent_ms))
            .join(User, Assignment.user_id == User.id)
            .join(captions, captions.c.id == Assignment.caption_id)
            .group_by(User.name, Assignment.user_id).order_by(User.name)).all()
        done = (select(Assignment.caption_id, func.count().label("n")).where(Assignment.status == "submitted")
                .group_by(Assignment.caption_id).subquery())
        n_items, needed, filled, complete = session.execute(
            select(func.count(), func.coalesce(func.sum(captions.c.annotators_needed), 0),
                   func.coalesce(func.sum(func.min(func.coalesce(done.c.n, 0), captions.c.annotators_needed)
                                          if store.dialect == "sqlite" else
                                          func.least(func.coalesce(done.c.n, 0), captions.c.annotators_needed)), 0),
                   func.coalesce(func.sum(case((func.coalesce(done.c.n, 0) >= captions.c.annotators_needed, 1),
                                               else_=0)), 0))
            .select_from(captions).outerjoin(done, done.c.caption_id == captions.c.id)).one()
        annotators = [{"annotator": name, "submitted": int(s or 0), "skipped": int(k or 0),
                       "in_progress": int(a or 0), "time_spent_ms": int(t or 0)}
                      for name, _, s, k, a, t in per_user]
        result = {"everyone": {"items": n_items, "items_complete": int(complete), "judgements_needed": int(needed),
                               "judgements_submitted": int(filled), "annotators": annotators}}
        if user is not None:
            mine = next((a for a in annotators if a["annotator"] == user.name),
                        {"annotator": user.name, "submitted": 0, "skipped": 0, "in_progress": 0, "time_spent_ms": 0})
            open_to_me = candidate_captions(user, dataset, now).subquery()
            available = session.scalar(select(func.count()).select_from(open_to_me))
            result["me"] = {**mine, "available": available}
        return result


# ---------------------------------------------------------------- filter choices

def dataset_names(store: Store) -> list[str]:
    with store.read() as session:
        return list(session.scalars(select(Dataset.name).order_by(Dataset.name)))


def annotator_names(store: Store) -> list[str]:
    """Users who were given at least one item, by name."""
    with store.read() as session:
        return list(session.scalars(select(User.name).where(exists().where(Assignment.user_id == User.id))
                                    .order_by(User.name)))


def score_keys(store: Store) -> list[tuple[str, str]]:
    """(metric, key) pairs of the stored predictions' global scores."""
    keys = set()
    with store.read() as session:
        for metric in session.scalars(select(Prediction.metric).distinct()).all():
            scores = session.scalar(select(Prediction.scores).where(Prediction.metric == metric).limit(1))
            keys.update((metric, key) for key in scores or {})
    return sorted(keys)
