"""Statistics shared by the benchmarks (bench/) and the demo trainers' probes (demo/)."""
from __future__ import annotations

import math


def auroc(gold: list[bool], scores: list[float | None]) -> float | None:
    """Area under the ROC curve of `scores` for the positive (True) class, over
    the entries that have a finite score; None when one class is missing."""
    pairs = [(g, s) for g, s in zip(gold, scores) if s is not None and not math.isnan(s)]
    if len({g for g, _ in pairs}) < 2:
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score([g for g, _ in pairs], [s for _, s in pairs]))
