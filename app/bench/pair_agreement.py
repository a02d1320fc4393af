"""Pairwise benchmarks (PASCAL-50S, FOIL, nocaps-FOIL) for `capscope correlate`:
how often a metric scores the caption people prefer strictly higher (a tie
counts as a miss: PAC-S sec. 4.3/4.4), averaged over reference draws,
PASCAL-50S per category and the mean of the categories; for FOIL and
nocaps-FOIL also how often a metric's lowest-scored semantic word is the foil
word."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from capscope.bench import published as pub
from capscope.bench.candidates import Candidate, Scored
from capscope.bench.published_comparison import first_value, with_published
from capscope.common.stats import bootstrap_interval

CATEGORIES = ("HC", "HI", "HM", "MM")


def pair_candidates(pair) -> list[Candidate]:
    return [Candidate(Path(pair.image), caption, tuple(draw))
            for draw in (pair.reference_draws or [[]]) for caption in pair.captions]


def pair_outcome(pair, scored, key: str) -> tuple[float, float, float] | None:
    """(share of reference draws where the preferred caption scores strictly
    higher, mean preferred score, mean other score), or None when a draw lacks
    the key."""
    wins, preferred_scores, other_scores = [], [], []
    for draw in pair.reference_draws or [[]]:
        refs = tuple(draw)
        values = [scored.get(Candidate(Path(pair.image), c, refs)) for c in pair.captions]
        if any(v is None or key not in v.scores for v in values):
            return None
        good, bad = values[pair.preferred].scores[key], values[1 - pair.preferred].scores[key]
        wins.append(1.0 if good > bad else 0.0)
        preferred_scores.append(good)
        other_scores.append(bad)
    return float(np.mean(wins)), float(np.mean(preferred_scores)), float(np.mean(other_scores))


def category_accuracy(wins, categories, idx) -> float:
    """Mean over categories of each category's accuracy (PASCAL-50S "Mean")."""
    wins, categories = wins[idx], categories[idx]
    shares = [wins[categories == c].mean() for c in np.unique(categories)]
    return float(np.mean(shares)) if shares else math.nan


def reference_setting(loaded) -> str:
    """FOIL's published columns: "1 ref" or "4 refs" (references per draw)."""
    counts = [len(draw) for pair in loaded.rows for draw in (pair.reference_draws or [[]])]
    most = max(set(counts), key=counts.count) if counts else 0
    return "4 refs" if most >= 4 else "1 ref"


def correlate_pairs(loaded, scored, failed, draws: int, seed: int) -> tuple[dict, dict, list[str], int]:
    problems, used = [], []
    for index, pair in enumerate(loaded.rows):
        missing = [c for c in pair_candidates(pair) if c not in scored]
        if missing:
            problems.append(f"row {index + 1} ({pair.group}): {failed.get(missing[0], 'not scored')}")
        else:
            used.append(pair)
    setting = reference_setting(loaded) if loaded.benchmark == "foil" else ""
    metrics, points = {}, {}
    for key in sorted({k for pair in used for c in pair_candidates(pair) for k in scored[c].scores}):
        outcomes = [(pair, pair_outcome(pair, scored, key)) for pair in used]
        outcomes = [(pair, o) for pair, o in outcomes if o is not None]
        if not outcomes:
            continue
        wins = np.array([o[0] for _, o in outcomes])
        categories = np.array([pair.category for pair, _ in outcomes])
        accuracy = lambda idx: category_accuracy(wins, categories, idx)
        figures = {"n": len(outcomes), "accuracy": accuracy(np.arange(len(wins))), "statistic": "accuracy",
                   "ci95": bootstrap_interval(accuracy, [pair.group for pair, _ in outcomes], draws, seed)}
        figures = with_published(figures, loaded.benchmark, "accuracy", key, setting)
        if loaded.benchmark == "pascal-50s":
            figures["categories"] = {
                c: {"n": int((categories == c).sum()), "accuracy": float(wins[categories == c].mean()),
                    "published": first_value(pub.lookup(loaded.benchmark, c, key))}
                for c in CATEGORIES if (categories == c).any()
            }
        if setting:
            figures["setting"] = setting
        metrics[key] = figures
        points[key] = ([o[1] for _, o in outcomes], [o[2] for _, o in outcomes])
    return metrics, points, problems, len(used)


def foil_word_hits(loaded, scored, metrics: list[str]) -> dict:
    """Per metric with word scores: how often its lowest-scored semantic word of
    the foil caption is the foil word (pairs whose file names the word)."""
    out = {}
    for metric in metrics:
        hits = n = 0
        for pair in loaded.rows:
            if not getattr(pair, "foil_word", None):
                continue
            foil = scored.get(Candidate(Path(pair.image), pair.captions[1 - pair.preferred],
                                        tuple((pair.reference_draws or [[]])[0])))
            lowest = lowest_semantic_word(foil, metric) if foil else None
            if lowest is None:
                continue
            n += 1
            hits += lowest.lower() in pair.foil_word.lower().split()
        if n:
            out[metric] = {"n": n, "lowest_word_is_foil": hits / n}
    return out


def lowest_semantic_word(scored: Scored, metric: str) -> str | None:
    values = scored.token_scores.get(metric) or []
    judged = [(s, t["text"]) for t, s in zip(scored.tokens, values) if t.get("semantic") and s is not None]
    return min(judged)[1] if judged else None
