"""Model predictions: the metrics of a `capscope score` output file (docs/formats.md)
stored as pre-annotations of a dataset's captions, matched by id."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from sqlalchemy import select

from capscope.annotation import audit
from capscope.annotation.importer.problems import ImportReport, RejectedRow
from capscope.annotation.importer.rows import read_jsonl
from capscope.annotation.uncertainty import prediction_uncertainty
from capscope.db import Caption, Dataset, Prediction, Store, Token
from capscope.db.models import utcnow
from capscope.common.jsonl import shown
from capscope.common.limits import finite_number
from capscope.metrics.constants import DEFAULT_TOKEN_RULE, TOKEN_RULES


def import_predictions(store: Store, path: Path, dataset: str = "default", model_version: str | None = None) -> ImportReport:
    """Store the metrics of a `capscope score` output file as pre-annotations
    of the dataset's captions (matched by id). Re-importing replaces them."""
    with Path(path).open("rb") as stream:
        report = import_prediction_rows(store, read_jsonl(stream), dataset, model_version)
    # only a file's import goes on the audit log: the Benchmark tab stores its scores as predictions too
    audit.record(store, "import", target=dataset, details={"file": Path(path).name, "kind": "predictions",
                                                           "added": report.added, "errors": len(report.errors)})
    return report


def import_prediction_rows(store: Store, numbered_rows: Iterable, dataset: str = "default",
                           model_version: str | None = None) -> ImportReport:
    """`import_predictions` on rows already in memory: (line number, output
    row) pairs; a row may be a RejectedRow (a line of a file that is no row)."""
    report = ImportReport()
    rows: list[tuple[int, str, dict, str, dict | None]] = []
    for line, obj in numbered_rows:
        if isinstance(obj, RejectedRow):
            report.errors.append(obj)
            continue
        metrics = obj.get("metrics")
        if obj.get("error") or not isinstance(metrics, dict):
            report.errors.append(RejectedRow(line, str(obj.get("id")), "row has no metrics"))
            continue
        problem = _metrics_problem(metrics)
        if problem:
            report.errors.append(RejectedRow(line, str(obj.get("id")), problem))
            continue
        model = obj.get("model") if isinstance(obj.get("model"), dict) else None
        version = model_version or json.dumps(model or {}, sort_keys=True)[:200]
        rows.append((line, str(obj.get("id")), metrics, version, model))
    for start in range(0, len(rows), 200):
        store.run_write(lambda s, chunk=rows[start:start + 200]: _write_predictions(s, dataset, chunk, report))
    return report


def _metrics_problem(metrics: dict) -> str:
    """Why a score row's metrics cannot be stored (checked before the write,
    so that one row of the wrong shape cannot stop the import), or ''."""
    for name, result in metrics.items():
        if result is None:
            continue
        if not isinstance(result, dict) or not isinstance(result.get("scores") or {}, dict):
            return f"metric {shown(name)}: its result must be an object with 'scores' an object"
        for key in ("token_scores", "region_scores"):
            values = result.get(key) or []
            if not isinstance(values, list) or not all(v is None or _is_number(v) for v in values):
                return f"metric {shown(name)}: '{key}' must be a list of numbers or nulls"
    return ""


def _is_number(value) -> bool:
    """A float as JSON reads one (NaN and infinities as capscope's rows may hold them), or an integer a
    float holds: the uncertainty that ranks a queue raised OverflowError on one of 400 digits."""
    return isinstance(value, float) or (isinstance(value, int) and finite_number(value))


def _write_predictions(session, dataset: str, rows, report: ImportReport) -> None:
    ids = {ext: cid for ext, cid in session.execute(
        select(Caption.external_id, Caption.id).join(Dataset, Caption.dataset_id == Dataset.id)
        .where(Dataset.name == dataset, Caption.external_id.in_([r[1] for r in rows]))
    )}
    for line, external_id, metrics, version, model in rows:
        if external_id not in ids:
            report.errors.append(RejectedRow(line, external_id, f"no caption with this id in dataset {dataset!r}"))
            continue
        upsert_predictions(session, ids[external_id], version, metrics, model)
        report.added += 1


def upsert_predictions(session, caption_id: int, version: str, metrics: dict, model: dict | None = None) -> None:
    """Store (or replace) every metric's result for a caption under `version`;
    `model`: the score row's model block, which names a fine-tuned checkpoint's
    word threshold scale (docs/formats.md)."""
    semantic = list(session.scalars(select(Token.semantic).where(Token.caption_id == caption_id).order_by(Token.index)))
    for metric, result in metrics.items():
        _upsert_prediction(session, caption_id, str(metric)[:50], version, result or {}, semantic or None,
                           recorded_word_scale(model, metric), recorded_token_rule(model, metric))


def recorded_token_rule(model: dict | None, metric: str) -> str:
    """The token rule a score row's model block says `metric` decided by: its
    `verdict` record, else the row's `token_rule`; a row that records none (written
    by hand, or before capscope recorded it) was scored under `capscope score`'s default."""
    model = model if isinstance(model, dict) else {}
    verdicts = model.get("verdict") if isinstance(model.get("verdict"), dict) else {}
    record = verdicts.get(metric) if isinstance(verdicts.get(metric), dict) else {}
    rule = record.get("token_rule", model.get("token_rule"))
    return rule if rule in TOKEN_RULES else DEFAULT_TOKEN_RULE


def recorded_word_scale(model: dict | None, metric: str) -> float | None:
    """The word threshold scale a score row's model block records for `metric`
    (`metric_options`); None when it records none, or not a positive number."""
    every = (model or {}).get("metric_options")
    options = every.get(metric) if isinstance(every, dict) else None
    scale = options.get("word_threshold_scale") if isinstance(options, dict) else None
    if not finite_number(scale) or scale <= 0:
        return None
    return None if scale == 1 else float(scale)


def _upsert_prediction(session, caption_id: int, metric: str, version: str, result: dict,
                       semantic: list[bool] | None, word_scale: float | None, token_rule: str) -> None:
    prediction = session.scalar(select(Prediction).where(
        Prediction.caption_id == caption_id, Prediction.metric == metric, Prediction.model_version == version))
    if prediction is None:
        prediction = Prediction(caption_id=caption_id, metric=metric, model_version=version)
        session.add(prediction)
    prediction.scores = result.get("scores") or {}
    prediction.token_scores = result.get("token_scores") or []
    prediction.region_scores = result.get("region_scores") or []
    prediction.word_scale = word_scale
    prediction.uncertainty = prediction_uncertainty(metric, prediction.token_scores, prediction.region_scores,
                                                    semantic, token_rule, word_scale or 1.0)
    prediction.created_at = utcnow()
