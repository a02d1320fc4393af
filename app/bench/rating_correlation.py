"""Rating benchmarks (Flickr8k-Expert, Flickr8k-CF, Composite, THumB) for
`capscope correlate`: Kendall tau_b and tau_c (scipy.stats.kendalltau) and
Pearson of every score key against the people's ratings, the paper's statistic
marked, each with its bootstrap interval over images, and a trivial baseline
(the caption's length in words) on the same judgements."""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from capscope.bench.candidates import Candidate
from capscope.bench.published_comparison import with_published
from capscope.common.stats import bootstrap_interval

BASELINE_KEY = "baseline.words"  # rating benchmarks: caption length in words, a trivial rule


def kendall(scores, human, variant: str) -> float:
    """scipy's Kendall tau (variant "b" or "c"), as PAC-S's compute_correlations.py calls it."""
    from scipy.stats import kendalltau  # scipy and sklearn load when used: ui.benchmark imports this module

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(kendalltau(scores, human, variant=variant).statistic)


def pearson(scores, human) -> float:
    from scipy.stats import pearsonr

    scores, human = np.asarray(scores, float), np.asarray(human, float)
    if len(scores) < 2 or np.ptp(scores) == 0 or np.ptp(human) == 0:
        return math.nan
    return float(pearsonr(scores, human).statistic)


def paper_statistic(loaded) -> str:
    """The statistic the papers report for this benchmark: Kendall tau_c
    (Flickr8k-Expert, Composite), tau_b (Flickr8k-CF) or Pearson (THumB)."""
    return f"tau_{loaded.tau_variant}" if loaded.tau_variant else "pearson"


def rating_figures(scores, human, groups, statistic: str, draws: int, seed: int) -> dict:
    scores, human = np.asarray(scores, float), np.asarray(human, float)
    stat = {
        "tau_b": lambda idx: kendall(scores[idx], human[idx], "b"),
        "tau_c": lambda idx: kendall(scores[idx], human[idx], "c"),
        "pearson": lambda idx: pearson(scores[idx], human[idx]),
    }
    everything = np.arange(len(scores))
    figures = {"n": int(len(scores)), **{name: f(everything) for name, f in stat.items()}}
    figures["statistic"] = statistic
    figures["ci95"] = bootstrap_interval(stat[statistic], groups, draws, seed)
    return figures


def correlate_ratings(loaded, scored, failed, draws: int, seed: int) -> tuple[dict, dict, list[str], int]:
    """Per score key its figures, the points for the plot, per-row problems and
    the number of judgements used."""
    statistic = paper_statistic(loaded)
    problems, used = [], []
    for index, row in enumerate(loaded.rows):
        candidate = rating_candidate(row)
        if candidate in scored:
            used.append((row, scored[candidate]))
        else:
            problems.append(f"row {index + 1} ({row.group}): {failed.get(candidate, 'not scored')}")
    metrics, points = {}, {}
    for key in sorted({k for _, s in used for k in s.scores}):
        kept = [(row, s.scores[key]) for row, s in used if math.isfinite(s.scores.get(key, math.nan))]
        if len(kept) < 2:
            continue
        human = [row.rating for row, _ in kept]
        values = [value for _, value in kept]
        figures = rating_figures(values, human, [row.group for row, _ in kept], statistic, draws, seed)
        metrics[key] = with_published(figures, loaded.benchmark, statistic, key)
        points[key] = (human, values)
    if len(used) >= 2:
        metrics[BASELINE_KEY] = baseline_figures([row for row, _ in used], statistic, draws, seed)
    return metrics, points, problems, len(used)


def baseline_figures(rows, statistic: str, draws: int, seed: int) -> dict:
    """A trivial rule on the same judgements, so that a metric's figure can be
    read against it: the caption's length in words."""
    words = [len(row.caption.split()) for row in rows]
    figures = rating_figures(words, [row.rating for row in rows], [row.group for row in rows], statistic, draws, seed)
    return dict(figures, published=None, published_source=None, published_all=[], reproduced=None,
                difference=None, baseline=True)


def rating_candidate(row) -> Candidate:
    return Candidate(Path(row.image), row.caption, tuple(row.references or ()))
