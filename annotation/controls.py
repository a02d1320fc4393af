"""Control items and each annotator's quality.

A control is an item with gold that an admin marks; the queue mixes controls
into what every annotator is handed, at each dataset's `control_rate`
(annotation/queue.py, `hand_out_control`), and nothing an annotator is shown
says which items they are. An annotator's control accuracy is the share of the
semantic words and of the regions (those they saw) of the controls they
submitted on which their label equals the gold, with a 95% Wilson interval over
those units; `quality` is the Dawid-Skene estimate of their accuracy from all
their labels (annotation/consensus.py).
"""
from __future__ import annotations

import math
from collections import defaultdict

from scipy.stats import binomtest
from sqlalchemy import select

from capscope.annotation import audit, consensus
from capscope.annotation.refusals import Invalid, NotFound
from capscope.annotation.votes import ItemData, iter_items
from capscope.db import Caption, Dataset, GoldLabel, Store

MAX_CONTROL_RATE = 0.5
DEFAULT_CONTROL_RATE = 0.1
CONFIDENCE_LEVEL = 0.95


# ---------------------------------------------------------------- settings

def set_control(store: Store, item_id: int, control: bool) -> dict:
    """Mark an item as a control (it must have gold) or unmark it."""
    if not isinstance(control, bool):
        raise Invalid(f"control must be true or false, got {control!r}")

    def work(session):
        caption = session.get(Caption, item_id, with_for_update=True)
        if caption is None:
            raise NotFound(f"no item {item_id}")
        gold = session.get(GoldLabel, item_id)
        if control and (gold is None or not _has_labels(gold)):
            raise Invalid(f"item {item_id} has no gold labels: give it gold before making it a control")
        caption.control = control
        audit.record_in(session, "control marked" if control else "control unmarked", target=f"item {item_id}")
        return {"item_id": item_id, "control": control}

    return store.run_write(work)


def _has_labels(gold: GoldLabel) -> bool:
    return any(label is not None for label in (gold.token_labels or []) + (gold.region_labels or []))


def check_rate(rate) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) \
            or not 0 <= rate <= MAX_CONTROL_RATE:
        raise Invalid(f"control rate must be a number from 0 to {MAX_CONTROL_RATE}, got {rate!r}")
    return float(rate)


def check_accuracy(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1:
        raise Invalid(f"a control accuracy threshold must be a number from 0 to 1, got {value!r}")
    return float(value)


_UNSET = object()


def set_control_settings(store: Store, dataset: str, rate=_UNSET, *, show_answers=_UNSET,
                         min_accuracy=_UNSET) -> dict:
    """Change any of a dataset's control rate, whether annotators see a control's
    answer once they submit it, and the control accuracy under which an annotator
    is flagged (None: nobody is). Returns `control_settings`."""
    changes = {}
    if rate is not _UNSET:
        changes["control_rate"] = check_rate(rate)
    if show_answers is not _UNSET:
        if not isinstance(show_answers, bool):
            raise Invalid(f"show_answers must be true or false, got {show_answers!r}")
        changes["show_control_answers"] = show_answers
    if min_accuracy is not _UNSET:
        changes["min_control_accuracy"] = check_accuracy(min_accuracy)

    def work(session):
        row = session.scalar(select(Dataset).where(Dataset.name == dataset).with_for_update())
        if row is None:
            raise NotFound(f"no dataset {dataset!r}")
        for name, value in changes.items():
            setattr(row, name, value)
        if changes:
            audit.record_in(session, "controls set", target=dataset, details=changes)
        return _settings_view(row)

    return store.run_write(work)


def control_settings(store: Store, dataset: str) -> dict:
    with store.read() as session:
        row = session.scalar(select(Dataset).where(Dataset.name == dataset))
        if row is None:
            raise NotFound(f"no dataset {dataset!r}")
        return _settings_view(row)


def _settings_view(row: Dataset) -> dict:
    return {"dataset": row.name, "rate": row.control_rate, "show_answers": bool(row.show_control_answers),
            "min_accuracy": row.min_control_accuracy}


# ---------------------------------------------------------------- quality

def wilson_interval(right: int, total: int, level: float = CONFIDENCE_LEVEL) -> list[float] | None:
    """The Wilson score interval of a proportion (None without trials)."""
    if total == 0:
        return None
    found = binomtest(right, total).proportion_ci(confidence_level=level, method="wilson")
    return [float(found.low), float(found.high)]


def control_units(item: ItemData) -> dict[str, tuple[int, int]]:
    """annotator -> (units right, units judged) on one control item (`agreement_with_gold`)."""
    return {j.user: agreement_with_gold(item, j) for j in item.judgements}


def annotator_quality(store: Store, dataset: str) -> list[dict]:
    """Per annotator of `dataset`, by name: judgements, controls submitted, control
    accuracy and its 95% interval, the consensus model's accuracy estimate
    (`quality`), agreement with the gold where there is gold, mean seconds per
    item, and `flagged` (control accuracy under the dataset's threshold)."""
    settings = control_settings(store, dataset)
    items = list(iter_items(store, dataset))
    controls = control_ids(store, dataset)
    estimated = consensus.annotator_accuracy(items)
    rows: dict[str, dict] = {}
    for item in items:
        for j in item.judgements:
            row = rows.setdefault(j.user, {"judgements": 0, "controls": 0, "right": 0, "units": 0,
                                           "agree": 0, "compared": 0, "spent_ms": 0})
            row["judgements"] += 1
            row["spent_ms"] += j.time_spent_ms
            agree, compared = agreement_with_gold(item, j)
            row["agree"] += agree
            row["compared"] += compared
        if item.caption_id in controls:
            for name, (right, total) in control_units(item).items():
                rows[name]["controls"] += 1
                rows[name]["right"] += right
                rows[name]["units"] += total
    return [_quality_row(name, row, estimated.get(name), settings["min_accuracy"]) for name, row in sorted(rows.items())]


def _quality_row(name: str, row: dict, quality: float | None, threshold: float | None) -> dict:
    accuracy = row["right"] / row["units"] if row["units"] else None
    return {"annotator": name, "judgements": row["judgements"], "controls": row["controls"],
            "control_accuracy": accuracy, "control_interval": wilson_interval(row["right"], row["units"]),
            "control_units": row["units"], "quality": quality,
            "agreement_with_consensus": row["agree"] / row["compared"] if row["compared"] else None,
            "mean_time_s": row["spent_ms"] / row["judgements"] / 1000 if row["judgements"] else None,
            "flagged": threshold is not None and accuracy is not None and accuracy < threshold}


def agreement_with_gold(item: ItemData, judgement) -> tuple[int, int]:
    """(units where the judgement's label equals the gold, units with gold) over
    the item's semantic words and the regions the judgement saw."""
    gold = item.gold
    if gold is None:
        return 0, 0
    agree = compared = 0
    for i, token in enumerate(item.tokens):
        label = gold.token_labels[i] if i < len(gold.token_labels) else None
        if token["semantic"] and label is not None:
            agree += (i in judgement.incorrect_tokens) == (label == "incorrect")
            compared += 1
    for i in range(len(item.regions)):
        label = gold.region_labels[i] if i < len(gold.region_labels) else None
        if label is not None and judgement in item.region_seers(i):
            agree += (i in judgement.mentioned_regions) == (label == "mentioned")
            compared += 1
    return agree, compared


def control_ids(store: Store, dataset: str | None = None) -> set[int]:
    """The caption ids of the control items (of `dataset`)."""
    query = select(Caption.id).where(Caption.control.is_(True))
    if dataset is not None:
        query = query.join(Dataset, Caption.dataset_id == Dataset.id).where(Dataset.name == dataset)
    with store.read() as session:
        return set(session.scalars(query))
