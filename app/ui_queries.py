"""Read-only queries the Explore tab needs beyond `annotation.browse`: the
same item list, also filtered by annotator and sorted by a stored model score.
Built on browse's own figure subqueries, so the columns mean the same."""
from __future__ import annotations

from sqlalchemy import exists, func, select

from capscope.annotation import browse
from capscope.annotation.errors import Invalid
from capscope.db import Assignment, Caption, Dataset, GoldLabel, Prediction, Store, User, utcnow


def dataset_names(store: Store) -> list[str]:
    with store.read() as session:
        return list(session.scalars(select(Dataset.name).order_by(Dataset.name)))


def annotator_names(store: Store) -> list[str]:
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


def list_items(store: Store, *, dataset: str | None = None, status: str = "all", search: str | None = None,
               sort: str = "id", descending: bool = False, annotator: str | None = None,
               score: tuple[str, str] | None = None, score_range: tuple[float | None, float | None] = (None, None),
               page: int = 1, page_size: int = 25) -> dict:
    """`browse.list_items` plus `annotator` (items this user was given) and
    `score` = (metric, key): show that stored score, sort by it, keep those in `score_range`."""
    if annotator is None and score is None:
        return browse.list_items(store, dataset=dataset, status=status, search=search, sort=sort,
                                 descending=descending, page=page, page_size=page_size)
    if sort not in browse.SORTS or status not in browse.STATUS_FILTERS:
        raise Invalid("unknown sort or status")
    submitted, active, disputed, uncertainty, flags = browse._item_figures(utcnow())
    n_submitted = func.coalesce(submitted.c.n, 0)
    columns = {
        "submitted": n_submitted,
        "in_progress": func.coalesce(active.c.n, 0),
        "disagreement": func.coalesce(disputed.c.n, 0),
        "uncertainty": uncertainty.c.u,
        "flags": func.coalesce(flags.c.n, 0),
        "has_gold": GoldLabel.caption_id.is_not(None),
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
    query = browse._filtered(query, dataset, status, search, n_submitted, columns)
    if annotator:
        query = query.where(exists().where(Assignment.caption_id == Caption.id, Assignment.user_id == User.id,
                                           User.name == annotator))
    order = None
    if score:
        metric, key = score
        value = (select(func.max(Prediction.scores[key].as_float())).where(Prediction.caption_id == Caption.id,
                                                                          Prediction.metric == metric)
                 .correlate(Caption).scalar_subquery())
        query = query.add_columns(value.label("score"))
        low, high = score_range
        if low is not None:
            query = query.where(value >= low)
        if high is not None:
            query = query.where(value <= high)
        order = func.coalesce(value, -1e9)
    else:
        order = {"id": Caption.id, "disagreement": columns["disagreement"], "submitted": n_submitted,
                 "uncertainty": func.coalesce(uncertainty.c.u, -1.0), "updated": Caption.id}[sort]
    with store.read() as session:
        total = session.scalar(select(func.count()).select_from(query.subquery()))
        rows = session.execute(query.order_by(order.desc() if descending else order.asc(), Caption.id)
                               .offset((page - 1) * page_size).limit(page_size)).mappings().all()
    items = [{"item_id": r["id"], "id": r["external_id"], "dataset": r["name"], "caption": r["text"],
              "image_id": r["image_id"], "needed": r["annotators_needed"],
              **{k: r[k] for k in columns}, **({"score": r["score"]} if score else {})} for r in rows]
    for item in items:
        item["has_gold"] = bool(item["has_gold"])
    return {"total": total, "page": page, "page_size": page_size, "items": items}
