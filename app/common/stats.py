"""Statistics shared by the benchmarks (bench/) and the demo trainers' probes (demo/)."""
from __future__ import annotations

import math

import numpy as np


def auroc(gold: list[bool], scores: list[float | None]) -> float | None:
    """Area under the ROC curve of `scores` for the positive (True) class, over
    the entries that have a finite score; None when one class is missing."""
    pairs = [(g, s) for g, s in zip(gold, scores) if s is not None and not math.isnan(s)]
    if len({g for g, _ in pairs}) < 2:
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score([g for g, _ in pairs], [s for _, s in pairs]))


def group_members(groups) -> list[np.ndarray]:
    """Row indices of each distinct group (image)."""
    _, inverse = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.cumsum(np.bincount(inverse))[:-1])


def bootstrap_interval(statistic, groups, draws: int = 1000, seed: int = 0) -> list[float] | None:
    """Percentile 95% interval of `statistic(row_indices)` over `draws`
    resamples of whole groups (images) with replacement. Draws whose statistic
    is undefined (e.g. all resampled rows tie) are left out."""
    members = group_members(groups)
    if draws < 1 or len(members) < 2:
        return None
    rng = np.random.default_rng(seed)
    order = np.concatenate(members)
    lengths = np.array([len(m) for m in members])
    starts = np.cumsum(lengths) - lengths
    values = np.empty(draws)
    for i in range(draws):
        picked = rng.integers(0, len(members), len(members))
        values[i] = statistic(order[_positions(starts[picked], lengths[picked])])
    if np.isnan(values).all():
        return None
    lo, hi = np.nanpercentile(values, [2.5, 97.5])
    return [float(lo), float(hi)]


def _positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices start, start + 1, ..., start + length - 1 of each run, one run
    after another (what concatenating the picked groups' members gives)."""
    total = int(lengths.sum())
    run_starts_in_output = np.cumsum(lengths) - lengths
    return np.arange(total) - np.repeat(run_starts_in_output - starts, lengths)
