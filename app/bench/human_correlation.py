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
(`bench.published`). Rows come from `bench.human.load` (a `Loaded`); the
candidates are scored by `bench.candidates`, CLIP4DM's protocols live in
`bench.dense`, and `bench.report` prints the table.
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capscope.bench import published as pub
from capscope.bench.candidates import Candidate, ModelNoting, Scored, score_candidates
from capscope.bench.dense import (
    READINGS,
    dense_epsilon,
    dense_section,
    pair_dense_captions,
    token_dense_captions,
    wants_dense,
)
from capscope.bench.evaluate import figures_of, predict_many, word_scale_of
from capscope.bench.gold_figures import collect_tokens
from capscope.common.stats import bootstrap_interval

CATEGORIES = ("HC", "HI", "HM", "MM")
BASELINE_KEY = "baseline.words"  # rating benchmarks: caption length in words, a trivial rule
LISTED_PROBLEMS = 5


# ---------------------------------------------------------------- scoring


# ---------------------------------------------------------------- statistics

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


# ---------------------------------------------------------------- rating benchmarks

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


# ---------------------------------------------------------------- pairwise benchmarks

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
                    "published": _first_value(pub.lookup(loaded.benchmark, c, key))}
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


# ---------------------------------------------------------------- token benchmarks

def correlate_tokens(loaded, scorer, metrics: list[str], *, batch_size: int, token_rule: str, beta: float,
                     progress: bool, draws: int = 1000, seed: int = 0) -> tuple[dict, list[str], dict]:
    """Per metric its figures, the problems, and the predictions (`predict_many`'s)."""
    out, problems = {}, []
    predicted = predict_many(scorer, metrics, loaded.rows, Path(loaded.base_dir), batch_size, progress)
    for metric, (predictions, errors) in predicted.items():
        figures = figures_of(loaded.rows, predictions, errors, metric, token_rule=token_rule, beta=beta,
                             word_scale=word_scale_of(scorer, metric))
        figures["average_precision"], figures["average_precision_ci95"] = incorrect_average_precision(
            loaded.rows, predictions, draws, seed)
        figures["pos"], figures["pos_note"] = pos_breakdown(loaded.rows, predictions, scorer.nlp)
        out[metric] = figures
        problems += [f"{metric}: item {e}" for e in errors]
    return out, problems, predicted


def incorrect_average_precision(items, predictions, draws: int = 0, seed: int = 0):
    """Average precision of "incorrect" ranked by the negated word score, and its
    bootstrap interval over images."""
    from sklearn.metrics import average_precision_score

    judged = collect_tokens(items, [p or {} for p in predictions])
    kept = [(g, s, image) for g, s, image in zip(judged.gold, judged.scores, labelled_token_images(items), strict=True)
            if s is not None and math.isfinite(s)]
    if not any(g for g, _, _ in kept):
        return None, None
    gold, scores = np.array([g for g, _, _ in kept]), np.array([s for _, s, _ in kept])

    def ap(idx):
        return float(average_precision_score(gold[idx], scores[idx])) if gold[idx].any() else math.nan

    return ap(np.arange(len(gold))), bootstrap_interval(ap, [image for _, _, image in kept], draws, seed)


def labelled_token_images(items) -> list[str]:
    """The image of each labelled semantic token (the order `collect_tokens` keeps)."""
    return [str(item["image"]) for item in items for t in item["tokens"]
            if t.get("semantic") and t.get("label") is not None]


def pos_breakdown(items, predictions, nlp) -> tuple[dict | None, str]:
    """Per spaCy part of speech: labelled semantic tokens, how many are
    incorrect, the accuracy of the metric's decisions and the AP of incorrect."""
    from sklearn.metrics import average_precision_score

    if not (nlp.has_pipe("tagger") or nlp.has_pipe("morphologizer")):
        return None, ("no part-of-speech breakdown: spaCy runs a blank pipeline without a tagger "
                      "(python -m spacy download en_core_web_sm)")
    tags = [tag for item in items for tag in labelled_token_tags(item, nlp)]
    judged = collect_tokens(items, [p or {} for p in predictions])
    by_tag = defaultdict(list)
    for tag, gold, decided, score in zip(tags, judged.gold, judged.decided, judged.scores, strict=True):
        by_tag[tag].append((gold, decided, score))
    table = {}
    for tag, rows in sorted(by_tag.items()):
        gold = [g for g, _, _ in rows]
        scored = [(g, s) for g, _, s in rows if s is not None]
        both = len({g for g, _ in scored}) == 2
        table[tag] = {
            "n": len(rows), "incorrect": sum(gold),
            "accuracy": sum(g == d for g, d, _ in rows) / len(rows),
            "average_precision": float(average_precision_score(*zip(*scored))) if both else None,
        }
    return table, "spaCy part-of-speech tags of the caption, matched to gold tokens by character offset"


def labelled_token_tags(item: dict, nlp) -> list[str]:
    """The POS tag of each labelled semantic token (the order `collect_tokens` keeps)."""
    tags = {t.idx: t.pos_ for t in nlp(item["caption"])}
    return [tags.get(t["start"], "X") or "X" for t in item["tokens"]
            if t.get("semantic") and t.get("label") is not None]


# ---------------------------------------------------------------- dense misalignment (CLIP4DM)


# ---------------------------------------------------------------- the whole run

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


def with_published(figures: dict, benchmark: str, statistic: str, key: str, setting: str = "") -> dict:
    """The paper's value beside the measured one: "reproduced" when it lies in the
    95% interval, else the signed difference (measured - published)."""
    entries = pub.lookup(benchmark, statistic, key, setting)
    others = [p for s in ("tau_b", "tau_c", "pearson") if s != statistic for p in pub.lookup(benchmark, s, key)]
    figures["published"] = entries[0].value if entries else None
    figures["published_source"] = entries[0].source.cite() if entries else None
    figures["published_all"] = [{"statistic": p.statistic, "value": p.value, "row": p.row, "source": p.source.cite(),
                                 **({"setting": p.setting} if p.setting else {})} for p in entries + others]
    measured, interval = figures.get(statistic), figures.get("ci95")
    figures["reproduced"] = None
    figures["difference"] = None
    if entries and measured is not None and math.isfinite(measured):
        figures["difference"] = measured - entries[0].value
        if interval:
            figures["reproduced"] = interval[0] <= entries[0].value <= interval[1]
    return figures


def cited_sources(result: dict) -> list[pub.Source]:
    cited = {entry["source"] for figures in result.get("metrics", {}).values()
             for entry in figures.get("published_all", [])}
    cited |= {row["source"] for figures in (result.get("dense") or {}).get("metrics", {}).values()
              for row in figures["published"]}
    return [s for s in pub.sources(pub.PUBLISHED) if s.cite() in cited]


def _first_value(entries) -> float | None:
    return entries[0].value if entries else None


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


# ---------------------------------------------------------------- the printed table


# (prefix, alignment, width) per column: the CLI pads the cells of `table` with these


