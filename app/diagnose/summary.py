"""What a captioner gets wrong, added up from scored rows (docs/formats.md §12)
into a `DiagnosisSummary`: `add_up` is what `capscope diagnose` and the
Compare tab both run.

Rows are read once, one at a time: per model and metric a `MetricTally` keeps
per-image sums (each image's mean score and its words judged and wrong, for
bootstrap intervals over images), counts per error type and per word, and the
few worst captions; nothing per row is kept, so memory grows with the number
of distinct images and words, not of rows.
"""
from __future__ import annotations

import heapq
import itertools
import json
from dataclasses import dataclass, field

import numpy as np

from capscope import __version__
from capscope.metrics.registry import SPECS, metric_title
from capscope.common.limits import finite_number
from capscope.common.stats import bootstrap_interval

from .diagnosis import (Comparison, DiagnosisSummary, ErrorType, Estimate, FailedRow, MetricSummary, MetricWarning,
                        ModelSummary, NgramScores, Provenance, RegionCount, WordDifference, WordDifferences,
                        WordRate, WrongWord)
from .error_types import TYPES, caption_types, type_source

EXAMPLES = 3          # example ids kept per word
TOP_WORDS = 15        # words listed per model and metric
WORST = 6             # worst captions kept per model and metric
MIN_JUDGED = 5        # a word compared between models was judged at least this often by each
DRAWS = 1000          # bootstrap draws
MAX_FAILED_LISTED = 100  # rows that could not be scored, listed with their reasons per model
CHANCE_RHO = 0.1      # a metric agreeing less than this with the others, image by image, may be at chance
MIN_PAIRS_FOR_CHANCE = 10


@dataclass
class WordCount:
    judged: int = 0
    wrong: int = 0
    examples: list[str] = field(default_factory=list)


class MetricTally:
    """One model's rows under one metric, added up."""

    def __init__(self, metric: str):
        self.metric = metric
        spec = SPECS.get(metric)
        self.primary = spec.primary_key if spec else None
        self.judges_regions = bool(spec and spec.needs.regions)
        self.scores: dict[str, dict[int, list[float]]] = {}   # key -> image -> [sum, count]
        self.words: dict[int, list[int]] = {}                  # image -> [judged, wrong]
        self.captions = 0
        self.captions_judged = 0
        self.captions_with_wrong = 0
        self.types = {t: [0, 0] for t in TYPES}               # type -> [judged, wrong]
        self.lemmas: dict[str, WordCount] = {}
        self.regions = [0, 0]                                  # judged, unmentioned
        self._worst: list[tuple[float, int, dict]] = []        # a max-heap of the lowest primaries
        self._order = itertools.count()

    def add(self, image: int, row: dict, result: dict, types: list[str | None]) -> None:
        self.captions += 1
        for key, value in result.get("scores", {}).items():
            if finite_number(value):
                slot = self.scores.setdefault(key, {}).setdefault(image, [0.0, 0])
                slot[0] += value
                slot[1] += 1
        self._add_words(image, row, result, types)
        mentioned = result.get("region_mentioned") or []
        if self.judges_regions:
            self.regions[0] += len(mentioned)
            self.regions[1] += sum(1 for m in mentioned if m is False)
        self._keep_if_worst(row, result)

    def _add_words(self, image: int, row: dict, result: dict, types: list[str | None]) -> None:
        correct = result.get("token_correct") or []
        judged = wrong = 0
        for token, verdict, kind in zip(row["tokens"], correct, types):
            if verdict is None:
                continue
            judged += 1
            wrong += verdict is False
            kind = kind or "other"
            self.types[kind][0] += 1
            self.types[kind][1] += verdict is False
            count = self.lemmas.setdefault(token["text"].lower(), WordCount())
            count.judged += 1
            if verdict is False:
                count.wrong += 1
                if len(count.examples) < EXAMPLES:
                    count.examples.append(str(row["id"]))
        if judged:
            self.captions_judged += 1
            self.captions_with_wrong += wrong > 0
            slot = self.words.setdefault(image, [0, 0])
            slot[0] += judged
            slot[1] += wrong

    def _keep_if_worst(self, row: dict, result: dict) -> None:
        value = result.get("scores", {}).get(self.primary)
        if not finite_number(value):
            return
        kept = {"id": row["id"], "image": row.get("image"), "caption": row["caption"], "tokens": row["tokens"],
                "regions": row["regions"], "result": result}
        entry = (-float(value), next(self._order), kept)
        if len(self._worst) < WORST:
            heapq.heappush(self._worst, entry)
        elif entry[0] > self._worst[0][0]:
            heapq.heapreplace(self._worst, entry)

    def worst(self) -> list[dict]:
        """The kept captions, worst (lowest primary score) first."""
        return [kept for _, _, kept in sorted(self._worst, key=lambda e: (-e[0], e[1]))]

    def image_means(self, key: str) -> dict[int, float]:
        return {image: s / n for image, (s, n) in self.scores.get(key, {}).items()}

    def summary(self, rng_seed: int, draws: int = DRAWS) -> MetricSummary:
        words = np.array(list(self.words.values()), dtype=np.float64).reshape(-1, 2)
        judged, wrong = int(words[:, 0].sum()), int(words[:, 1].sum())
        return MetricSummary(
            scores={key: mean_with_interval(np.array(list(self.image_means(key).values())), draws, rng_seed)
                    for key in self.scores},
            words=WordRate(judged, wrong, wrong / judged if judged else None, ratio_interval(words, draws, rng_seed)),
            captions_with_wrong_word=(self.captions_with_wrong / self.captions_judged if self.captions_judged
                                      else None),
            error_types=self.error_types(),
            top_wrong_words=top_words(self.lemmas),
            regions=self.region_count() if self.judges_regions else None,
        )

    def error_types(self) -> dict[str, ErrorType]:
        n_errors = sum(w for _, w in self.types.values())
        return {t: ErrorType(j, w, w / j if j else None, w / n_errors if n_errors else 0.0)
                for t, (j, w) in self.types.items()}

    def region_count(self) -> RegionCount:
        judged, unmentioned = self.regions
        return RegionCount(judged, unmentioned, unmentioned / judged if judged else None)


def top_words(lemmas: dict[str, WordCount], n: int = TOP_WORDS) -> tuple[WrongWord, ...]:
    """The words most often judged wrong: by times wrong, then wrong rate."""
    wrong = [(w, c) for w, c in lemmas.items() if c.wrong]
    wrong.sort(key=lambda item: (-item[1].wrong, -item[1].wrong / item[1].judged, item[0]))
    return tuple(WrongWord(w, c.judged, c.wrong, c.wrong / c.judged, tuple(c.examples)) for w, c in wrong[:n])


def mean_with_interval(values: np.ndarray, draws: int, seed: int) -> Estimate:
    """The mean of per-image values with a 95% bootstrap interval over images."""
    if not len(values):
        return Estimate(None, (None, None))
    return Estimate(float(values.mean()), _interval(lambda rows: values[rows].mean(), len(values), draws, seed))


def ratio_interval(counts: np.ndarray, draws: int, seed: int) -> tuple:
    """95% bootstrap interval over images of sum(wrong) / sum(judged); counts is images x (judged, wrong)."""
    def rate(rows):
        total = counts[rows, 0].sum()
        return counts[rows, 1].sum() / total if total else np.nan
    return _interval(rate, len(counts), draws, seed)


def _interval(statistic, n_images: int, draws: int, seed: int) -> tuple:
    """`stats.bootstrap_interval` over images that are one row each; (None, None) when it has none."""
    return tuple(bootstrap_interval(statistic, range(n_images), draws, seed) or (None, None))


def paired_comparison(a: str, b: str, metric: str, key: str, a_means: dict[int, float], b_means: dict[int, float],
                      draws: int, seed: int) -> Comparison | None:
    """Mean paired difference a - b over the images both have, its paired
    bootstrap interval, and how many images each wins; None when they share none."""
    common = sorted(set(a_means) & set(b_means))
    if not common:
        return None
    diff = np.array([a_means[i] - b_means[i] for i in common])
    return Comparison(a, b, metric, key, n_images=len(common), mean_difference=float(diff.mean()),
                      ci95=_interval(lambda rows: diff[rows].mean(), len(diff), draws, seed),
                      a_wins=int((diff > 0).sum()), b_wins=int((diff < 0).sum()), ties=int((diff == 0).sum()))


def word_rate_differences(a: MetricTally, b: MetricTally, n: int = TOP_WORDS) -> tuple[WordDifference, ...]:
    """The words whose wrong rates differ most between two models (each judged them MIN_JUDGED times or more)."""
    rows = []
    for word in set(a.lemmas) & set(b.lemmas):
        ca, cb = a.lemmas[word], b.lemmas[word]
        if ca.judged >= MIN_JUDGED and cb.judged >= MIN_JUDGED:
            ra, rb = ca.wrong / ca.judged, cb.wrong / cb.judged
            rows.append(WordDifference(word, ca.judged, ra, cb.judged, rb, ra - rb))
    rows.sort(key=lambda r: (-abs(r.difference), r.word))
    return tuple(rows[:n])


@dataclass
class ModelTally:
    """One model's rows added up: counts, the rows that could not be scored, a `MetricTally` per metric."""
    captions: int = 0
    errors: int = 0
    images: set[int] = field(default_factory=set)
    failed: list[FailedRow] = field(default_factory=list)
    tallies: dict[str, MetricTally] = field(default_factory=dict)

    def summary(self, metrics: list[str], seed: int, draws: int) -> ModelSummary:
        return ModelSummary(self.captions, len(self.images), self.errors,
                            {m: self.tallies[m].summary(seed, draws) for m in metrics if m in self.tallies},
                            tuple(self.failed))


class Diagnosis:
    """Every model's rows added up; `summary()` is the `DiagnosisSummary` (summary.json)."""

    def __init__(self, metrics: list[str] | None, nlp, type_source: str):
        self.asked = metrics
        self.nlp, self.type_source = nlp, type_source
        self.images: dict[str, int] = {}          # image key -> index, shared by all models
        self.models: dict[str, ModelTally] = {}
        self.scorers: dict[str, dict] = {}        # each distinct `model` description of the rows, by its JSON

    def add_rows(self, name: str, rows) -> None:
        model = self.models.setdefault(name, ModelTally())
        for row in rows:
            model.captions += 1
            if row.get("error") and not row.get("metrics"):
                model.errors += 1
                if len(model.failed) < MAX_FAILED_LISTED:
                    model.failed.append(FailedRow(_text_or_none(row.get("id")), str(row["error"])))
                continue
            if isinstance(row.get("model"), dict):
                self.scorers.setdefault(json.dumps(row["model"], sort_keys=True), row["model"])
            image = self.images.setdefault(image_key(row), len(self.images))
            model.images.add(image)
            self._add_metrics(model, image, row)

    def _add_metrics(self, model: ModelTally, image: int, row: dict) -> None:
        types = None
        for metric, result in row["metrics"].items():
            if self.asked and metric not in self.asked:
                continue
            if types is None:
                types = caption_types(row["caption"], row["tokens"], self.nlp)
            tally = model.tallies.setdefault(metric, MetricTally(metric))
            tally.add(image, row, result, types)

    def metrics(self) -> list[str]:
        seen = dict.fromkeys(m for model in self.models.values() for m in model.tallies)
        return [m for m in (self.asked or seen) if m in seen]

    def summary(self, seed: int = 0, draws: int = DRAWS,
                ngram_scores: dict[str, NgramScores] | None = None) -> DiagnosisSummary:
        metrics = self.metrics()
        models = {name: model.summary(metrics, seed, draws) for name, model in self.models.items()}
        pairs = list(self._pairs(metrics))
        return DiagnosisSummary(
            metrics=tuple(metrics), type_source=self.type_source, models=models,
            comparisons=_comparisons(pairs, draws, seed),
            word_differences=tuple(WordDifferences(a, b, metric, word_rate_differences(ta, tb))
                                   for a, b, metric, ta, tb in pairs),
            ngram_scores=ngram_scores or {},
            provenance=self.provenance(),
            warnings=chance_warnings(self.models, metrics, models),
        )

    def _pairs(self, metrics: list[str]):
        """(a, b, metric, a's tally, b's tally) for each pair of models (a named before b) and metric both have."""
        for a, b in itertools.combinations(self.models, 2):
            for metric in metrics:
                ta, tb = self.models[a].tallies.get(metric), self.models[b].tallies.get(metric)
                if ta is not None and tb is not None:
                    yield a, b, metric, ta, tb

    def provenance(self) -> Provenance:
        """What scored the rows (`result.Provenance`): a shared report must say when the demo model did."""
        scorers = tuple(self.scorers.values())
        return Provenance(__version__, any(bool(s.get("demo")) for s in scorers), scorers)

    def worst(self, name: str, metric: str) -> list[dict]:
        tally = self.models[name].tallies.get(metric)
        return tally.worst() if tally else []


def _comparisons(pairs: list[tuple], draws: int, seed: int) -> tuple[Comparison, ...]:
    """Each pair's every score key compared on the images both captioned."""
    compared = (paired_comparison(a, b, metric, key, ta.image_means(key), tb.image_means(key), draws, seed)
                for a, b, metric, ta, tb in pairs for key in ta.scores)
    return tuple(c for c in compared if c is not None)


def add_up(models, metrics: list[str] | None = None) -> Diagnosis:
    """`models`: (name, its scored rows) pairs, each read once as it comes;
    the rows added up per model and metric (only `metrics` when named), kinds
    of words decided by the spaCy pipeline there is. What `capscope diagnose`
    and the Compare tab both run; `.summary()` gives the `DiagnosisSummary`."""
    from capscope.metrics.text import load_spacy

    nlp = load_spacy()
    diagnosis = Diagnosis(metrics, nlp, type_source(nlp))
    for name, rows in models:
        diagnosis.add_rows(name, rows)
    return diagnosis


def chance_warnings(models: dict[str, ModelTally], metrics: list[str],
                    summaries: dict[str, ModelSummary]) -> tuple[MetricWarning, ...]:
    """A warning for each word-level metric whose verdicts look no better than
    chance here: its per-image wrong rates agree with the other word-level
    metrics' at Spearman rho < CHANCE_RHO (over every captioner-image pair),
    and it tells no two captioners apart (their wrong-rate intervals overlap)
    while another metric does. Both must hold: with two metrics the agreement
    alone cannot say which one is at chance."""
    from scipy.stats import spearmanr

    word_metrics = [m for m in metrics if any(_words_judged(summaries, n, m) for n in summaries)]
    separating = {m: _separates(summaries, m) for m in word_metrics}
    warnings = []
    for metric in word_metrics:
        others = [m for m in word_metrics if m != metric]
        if not others or separating[metric] or not any(separating[o] for o in others):
            continue
        own, rest = [], []
        for model in models.values():
            rates = {m: _image_rates(model.tallies.get(m)) for m in word_metrics}
            for image, rate in rates[metric].items():
                theirs = [rates[o][image] for o in others if image in rates[o]]
                if theirs:
                    own.append(rate)
                    rest.append(float(np.mean(theirs)))
        if len(own) < MIN_PAIRS_FOR_CHANCE or np.ptp(own) == 0 or np.ptp(rest) == 0:
            rho = 0.0 if len(own) >= MIN_PAIRS_FOR_CHANCE else None
        else:
            rho = float(spearmanr(own, rest).statistic)
        if rho is not None and rho < CHANCE_RHO:
            warnings.append(MetricWarning(
                metric, "spearman-with-other-metrics", round(rho, 4), len(own),
                f"{metric_title(metric)}'s word verdicts look no better than chance on these captions: "
                f"image by image they agree with {', '.join(metric_title(o) for o in others)} at Spearman "
                f"rho = {rho:.2f} over {len(own)} captioner-image pairs, and they tell no two captioners "
                "apart while the others do. Read its wrong words with care."))
    return tuple(warnings)


def _words_judged(summaries: dict[str, ModelSummary], model: str, metric: str) -> int:
    found = summaries[model].metrics.get(metric)
    return found.words.judged if found else 0


def _separates(summaries: dict[str, ModelSummary], metric: str) -> bool:
    """Whether two captioners' wrong-rate intervals under `metric` do not overlap."""
    intervals = [s.metrics[metric].words.ci95 for s in summaries.values() if metric in s.metrics]
    intervals = [ci for ci in intervals if ci and ci[0] is not None]
    return any(a[1] < b[0] or b[1] < a[0] for a, b in itertools.combinations(intervals, 2))


def _image_rates(tally: MetricTally | None) -> dict[int, float]:
    if tally is None:
        return {}
    return {image: wrong / judged for image, (judged, wrong) in tally.words.items() if judged}


def _text_or_none(value) -> str | None:
    return None if value is None else str(value)


def image_key(row: dict) -> str:
    """What names a row's image across models: its path as given, else its id."""
    return str(row.get("image") or row.get("id"))
