"""Read-only queries the Explore tab needs beside `annotation.browse.list_items`:
the choices for its filters."""
from __future__ import annotations

from sqlalchemy import exists, select

from capscope.db import Assignment, Dataset, Prediction, Store, User


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


