"""Model versions: the fine-tuned InfoMetIC checkpoints a server knows, which
one it scores with (at most one active; none = the server's default model),
and the predictions a version makes for a dataset's queued items.

A version's predictions are stored under `version_tag(version)` ("v3:<first 12
hex digits of its sha256>"), so every stored prediction names the checkpoint
that made it and the uncertainty queue order can follow one version; those of
the default model, once an admin goes back to it, under `DEFAULT_TAG`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from sqlalchemy import func, select, update

from capscope.annotation.refusals import Invalid, NotFound
from capscope.annotation.importer.predictions import upsert_predictions
from capscope.db import Assignment, Caption, Dataset, ModelVersion, Store

MAX_NAME = 200


def version_view(row: ModelVersion) -> dict:
    return {"id": row.id, "name": row.name, "path": row.path, "sha256": row.sha256,
            "parent_sha256": row.parent_sha256, "parent_id": row.parent_id, "dataset": row.dataset,
            "labels": row.labels or {}, "figures": row.figures or {}, "status": row.status,
            "created_at": row.created_at.isoformat() + "Z", "active": bool(row.active)}


def version_tag(version: dict) -> str:
    """The `model_version` its predictions are stored under."""
    return f"v{version['id']}:{version['sha256'][:12]}"


DEFAULT_TAG = "default-model"  # predictions of the server's default model, stored when an admin goes back to it

VERSION_TAG = re.compile(r"v(\d+):[0-9a-f]{1,64}")


def is_version_tag(model_version: str) -> bool:
    """Whether a stored prediction's `model_version` is a version's tag (not an imported file's)."""
    return tagged_version_id(model_version) is not None


def tagged_version_id(model_version: str) -> int | None:
    """The version id a tag names (`version_tag`); None for any other `model_version`."""
    found = VERSION_TAG.fullmatch(model_version)
    return int(found.group(1)) if found else None


def fitted_word_scale(figures: dict) -> float | None:
    """The word threshold scale fitted when the version was trained (None: not fitted)."""
    fit = (figures or {}).get("word_threshold")
    return float(fit["scale"]) if fit else None


def add_version(store: Store, *, path: str | Path, sha256: str, name: str | None = None,
                parent_sha256: str | None = None, parent_id: int | None = None, dataset: str | None = None,
                labels: dict | None = None, figures: dict | None = None) -> dict:
    """Record a checkpoint file as a new version (not active); `name` defaults to "v<id>"."""
    if name is not None and not 0 < len(name) <= MAX_NAME:
        raise Invalid(f"a version name has 1 to {MAX_NAME} characters")

    def work(session):
        if parent_id is not None and session.get(ModelVersion, parent_id) is None:
            raise NotFound(f"no model version {parent_id}")
        row = ModelVersion(name=name or "", path=str(path), sha256=sha256, parent_sha256=parent_sha256,
                           parent_id=parent_id, dataset=dataset, labels=labels or {}, figures=figures or {},
                           status="ready", active=False)
        session.add(row)
        session.flush()
        if not name:
            row.name = f"v{row.id}"
        return version_view(row)

    return store.run_write(work)


def list_versions(store: Store) -> list[dict]:
    """Every version, oldest first."""
    with store.read() as session:
        return [version_view(row) for row in session.scalars(select(ModelVersion).order_by(ModelVersion.id))]


def get_version(store: Store, version_id: int) -> dict:
    with store.read() as session:
        row = session.get(ModelVersion, version_id)
        if row is None:
            raise NotFound(f"no model version {version_id}")
        return version_view(row)


def version_with_sha256(store: Store, sha256: str) -> dict | None:
    """The oldest version whose file has this sha256, if any."""
    with store.read() as session:
        row = session.scalar(select(ModelVersion).where(ModelVersion.sha256 == sha256).order_by(ModelVersion.id))
        return None if row is None else version_view(row)


def activate_version(store: Store, version_id: int | None) -> dict | None:
    """Make `version_id` the one active version (None: no version, the server's
    default model). One statement sets every row, so two activations at once
    leave exactly one active: the later one's."""

    def work(session):
        if version_id is not None and session.get(ModelVersion, version_id) is None:
            raise NotFound(f"no model version {version_id}")
        session.execute(update(ModelVersion).values(active=ModelVersion.id == version_id)
                        if version_id is not None else update(ModelVersion).values(active=False))
        return None if version_id is None else version_view(session.get(ModelVersion, version_id))

    return store.run_write(work)


def active_version(store: Store) -> dict | None:
    with store.read() as session:
        row = session.scalar(select(ModelVersion).where(ModelVersion.active.is_(True)).order_by(ModelVersion.id))
        return None if row is None else version_view(row)


# ---------------------------------------------------------------- predictions of a version

def _queued(dataset_id: int):
    """Captions of the dataset that still need judgements (fewer submitted or skipped ones than annotators needed)."""
    finished = (select(func.count()).select_from(Assignment)
                .where(Assignment.caption_id == Caption.id, Assignment.status.in_(("submitted", "skipped")))
                .correlate(Caption).scalar_subquery())
    return (Caption.dataset_id == dataset_id, finished < Caption.annotators_needed)


def _dataset_id(session, dataset: str) -> int:
    dataset_id = session.scalar(select(Dataset.id).where(Dataset.name == dataset))
    if dataset_id is None:
        raise NotFound(f"no dataset {dataset!r}")
    return dataset_id


def queued_count(store: Store, dataset: str) -> int:
    with store.read() as session:
        return session.scalar(select(func.count()).select_from(Caption).where(*_queued(_dataset_id(session, dataset))))


def queued_items(store: Store, dataset: str, limit: int, after: int = 0) -> list[dict]:
    """Up to `limit` queued captions of `dataset` with ids above `after`, by id
    (pages of the queue, so that no more than a page is held at once), with what
    scoring them takes: {"caption_id", "image", "caption", "references", "tokens", "regions"}."""
    with store.read() as session:
        captions = session.scalars(select(Caption).where(*_queued(_dataset_id(session, dataset)), Caption.id > after)
                                   .order_by(Caption.id).limit(limit)).all()
        return [{"caption_id": c.id, "image": c.image.path, "caption": c.text, "references": c.references or None,
                 "tokens": [{"text": t.text, "start": t.start, "end": t.end, "semantic": t.semantic} for t in c.tokens],
                 "regions": [{"box": r.box, "mask": r.mask_rle} for r in c.image.regions]}
                for c in captions]


def store_version_predictions(store: Store, model_version: str, rows: list[tuple[int, dict]]) -> int:
    """(caption id, score row) pairs stored as predictions under `model_version`
    (every metric of each row); returns how many captions got one."""

    def work(session):
        for caption_id, row in rows:
            upsert_predictions(session, caption_id, model_version, row.get("metrics") or {}, row.get("model"))
        return len(rows)

    return store.run_write(work) if rows else 0


def rescore_queued(store: Store, dataset: str, model_version: str, score_page: Callable[[list[dict]], list[dict]], *,
                   limit: int | None, chunk: int = 8, on_progress: Callable[[int, int], None] | None = None,
                   should_stop: Callable[[], bool] | None = None) -> dict:
    """Score the queued captions of `dataset` (the first `limit` by id; None:
    all of them) and store the rows under `model_version`, a page of `chunk`
    captions per read, per `score_page(items)` call (one score row per item, in
    order: a batch for the scorer) and per transaction. A row with an error and
    no metrics is counted as failed and not stored.
    Returns {"total", "scored", "failed", "stopped"}."""
    total = queued_count(store, dataset)
    total = total if limit is None else min(total, limit)
    done, failed, after = 0, 0, 0
    while done + failed < total:
        if should_stop is not None and should_stop():
            return {"total": total, "scored": done, "failed": failed, "stopped": True}
        page = queued_items(store, dataset, min(chunk, total - done - failed), after)
        if not page:
            break   # the rest were judged meanwhile
        rows = score_page(page)
        scored = [(item["caption_id"], row) for item, row in zip(page, rows) if row.get("metrics")]
        store_version_predictions(store, model_version, scored)
        done, failed = done + len(scored), failed + len(page) - len(scored)
        after = page[-1]["caption_id"]
        if on_progress is not None:
            on_progress(done + failed, total)
    return {"total": total, "scored": done, "failed": failed, "stopped": False}
