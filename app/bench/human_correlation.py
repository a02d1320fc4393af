"""`capscope correlate`: score every candidate of a human-judgement benchmark
through the public `Scorer.score_batch` and compare every score key with the
people's judgements, as the papers do.

- rating benchmarks (Flickr8k-Expert, Flickr8k-CF, Composite, THumB): Kendall
  tau_b and tau_c (scipy.stats.kendalltau) and Pearson, the paper's choice marked;
- pairwise benchmarks (PASCAL-50S, FOIL, nocaps-FOIL): how often the metric scores
  the caption people prefer strictly higher (a tie counts as a miss: PAC-S sec.
  4.3/4.4, "assigns a higher score"), averaged over reference draws, PASCAL-50S per
  category and the mean of the categories; FOIL and nocaps-FOIL also say how often
  a metric's lowest-scored semantic word is the foil word, where the file names it;
- token benchmarks (HAT, CapTokenEval): the figures of `capscope evaluate` plus
  the average precision of "incorrect" and a per-part-of-speech breakdown;
- dense misalignment (FOIL, nocaps-FOIL, HAT with clip4dm or clip-s): CLIP4DM's
  protocols, as its released main.py reads them: the localisation accuracy (LA)
  of clip4dm's word reading and the average precision (AP) with which
  F-CLIPScore and CLIP-S tell misaligned captions from the others.

Every figure gets a percentile bootstrap 95% interval that resamples images
(the rows' `group`), seeded, and the papers' published value beside it
(`bench.published`, compared in `bench.published_comparison`). Rows come from
`bench.human.load` (a `Loaded`); the candidates are scored by
`bench.candidates`; each kind's figures come from `bench.rating_correlation`,
`bench.pair_agreement` and `bench.token_agreement`, CLIP4DM's protocols live in
`bench.dense`, and `bench.correlation_report` prints the table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from capscope.bench.candidates import ModelNoting, score_candidates
from capscope.bench.dense import (
    READINGS,
    dense_epsilon,
    dense_section,
    pair_dense_captions,
    token_dense_captions,
    wants_dense,
)
from capscope.bench.pair_agreement import correlate_pairs, foil_word_hits, pair_candidates
from capscope.bench.published_comparison import cited_sources
from capscope.bench.rating_correlation import correlate_ratings, paper_statistic, rating_candidate
from capscope.bench.token_agreement import correlate_tokens

LISTED_PROBLEMS = 5


@dataclass
class Outcome:
    result: dict                      # what `capscope correlate --json` prints
    problems: list[str]               # loading and scoring problems, one per row
    points: dict = field(default_factory=dict)   # key -> (human or preferred, metric or other) for the plot


def correlate(loaded, scorer, metrics: list[str], *, batch_size: int = 32, bootstrap: int = 1000, seed: int = 0,
              token_rule: str, beta: float, progress: bool = True) -> Outcome:
    problems = list(loaded.problems)
    scorer = ModelNoting(scorer)
    result = {"benchmark": loaded.benchmark, "kind": loaded.kind, "n": 0, "protocol": loaded.protocol,
              "bootstrap": {"draws": bootstrap, "seed": seed, "resamples": "images"},
              "demo": bool(getattr(scorer, "demo", False))}
    if loaded.kind == "token":
        figures, more, predicted = correlate_tokens(loaded, scorer, metrics, batch_size=batch_size,
                                                    token_rule=token_rule, beta=beta, progress=progress,
                                                    draws=bootstrap, seed=seed)
        result.update(n=len(loaded.rows), metrics=figures)
        if wants_dense(loaded, metrics):
            captions = token_dense_captions(loaded.rows, predicted, dense_epsilon(scorer.model))
            result["dense"] = dense_section(loaded.benchmark, captions, scorer.model, bootstrap, seed)
        return Outcome(finish(result, problems + more), problems + more)
    if loaded.kind == "rating":
        candidates = [rating_candidate(row) for row in loaded.rows]
    else:
        candidates = [c for pair in loaded.rows for c in pair_candidates(pair)]
    scored, failed = score_candidates(scorer, candidates, batch_size=batch_size, progress=progress,
                                      desc=f"correlate {loaded.benchmark}")
    by_kind = correlate_ratings if loaded.kind == "rating" else correlate_pairs
    figures, points, more, used = by_kind(loaded, scored, failed, bootstrap, seed)
    result.update(n=used, statistic=paper_statistic(loaded) if loaded.kind == "rating" else "accuracy",
                  metrics=figures)
    if loaded.benchmark in ("foil", "nocaps-foil"):
        result["foil_word"] = foil_word_hits(loaded, scored, metrics)
    if wants_dense(loaded, metrics):
        captions = pair_dense_captions(loaded, scored, READINGS[loaded.benchmark], dense_epsilon(scorer.model))
        result["dense"] = dense_section(loaded.benchmark, captions, scorer.model, bootstrap, seed)
    return Outcome(finish(result, problems + more), problems + more, points)


def finish(result: dict, problems: list[str]) -> dict:
    result["n_problems"] = len(problems)
    result["problems"] = problems[:LISTED_PROBLEMS]
    result["sources"] = [s.cite() for s in cited_sources(result)]
    return json_safe(result)


def json_safe(value):
    """NaN and infinities become null (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return value
