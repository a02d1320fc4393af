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
(`bench.published`). Rows come from `bench.human.load` (a `Loaded`).
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path

import numpy as np

from capscope.metrics.stats import bootstrap_interval

from capscope.bench import published as pub

CATEGORIES = ("HC", "HI", "HM", "MM")
BASELINE_KEY = "baseline.words"  # rating benchmarks: caption length in words, a trivial rule
LISTED_PROBLEMS = 5


# ---------------------------------------------------------------- scoring

@dataclass(frozen=True)
class Candidate:
    """One caption to score: benchmarks repeat these (three experts rate one
    caption; PASCAL-50S scores each caption once per reference draw)."""
    image: Path
    caption: str
    references: tuple[str, ...] = ()


@dataclass
class Scored:
    scores: dict[str, float]                                  # "<metric>.<key>" -> value
    tokens: list[dict] = field(default_factory=list)          # the scorer's tokens of the caption
    token_scores: dict[str, list] = field(default_factory=dict)   # metric -> one score (or None) per token
    words: dict[str, list] = field(default_factory=dict)      # metric -> its `words` (clip4dm)


class ModelNoting:
    """The scorer, noting the `model` block of the rows it returns: the dense
    readings need the epsilon the rows were scored with, and the published
    values the CLIP they were scored with. Everything else is the scorer's."""

    def __init__(self, scorer):
        self.scorer, self.model = scorer, {}

    def score_batch(self, rows, *args, **kwargs):
        out = self.scorer.score_batch(rows, *args, **kwargs)
        self.model = next((row["model"] for row in out if row.get("model")), self.model)
        return out

    def __getattr__(self, name):
        return getattr(self.scorer, name)


def score_candidates(scorer, candidates, *, batch_size: int = 32, progress: bool = True,
                     desc: str = "correlate") -> tuple[dict[Candidate, Scored], dict[Candidate, str]]:
    """Each distinct candidate scored once, image by image (each image is read
    once and its features computed once: the scorer caches them per image).
    Returns the scored candidates and, for those that failed, why."""
    from tqdm import tqdm

    unique = sorted(set(candidates), key=lambda c: (str(c.image), c.caption, c.references))
    scored: dict[Candidate, Scored] = {}
    failed: dict[Candidate, str] = {}
    batch: list[tuple[Candidate, dict]] = []
    with tqdm(total=len(unique), desc=desc, unit="caption", disable=not progress, mininterval=2.0) as bar:
        for image_path, group in groupby(unique, key=lambda c: c.image):
            picture, problem = open_image(image_path)
            for candidate in group:
                if problem:
                    failed[candidate] = problem
                    bar.update(1)
                    continue
                batch.append((candidate, scoring_row(len(batch), picture, candidate)))
                if len(batch) >= batch_size:
                    _score_batch(scorer, batch, scored, failed)
                    bar.update(len(batch))
                    batch = []
        if batch:
            _score_batch(scorer, batch, scored, failed)
            bar.update(len(batch))
    return scored, failed


def scoring_row(index: int, picture, candidate: Candidate) -> dict:
    return {"id": str(index), "image": picture, "caption": candidate.caption,
            "references": list(candidate.references) or None}


def open_image(path: Path):
    """(RGB image, None) or (None, why it cannot be read)."""
    from capscope.metrics.images import ImageError, read_image

    try:
        return read_image(path), None
    except ImageError as err:
        return None, str(err)


def _score_batch(scorer, batch, scored: dict, failed: dict) -> None:
    rows = scorer.score_batch([row for _, row in batch])
    for (candidate, _), row in zip(batch, rows, strict=True):
        if not row["metrics"]:
            failed[candidate] = row.get("error") or "not scored"
            continue
        scored[candidate] = Scored(
            scores={f"{name}.{key}": float(value) for name, out in row["metrics"].items()
                    for key, value in out.get("scores", {}).items()},
            tokens=row.get("tokens") or [],
            token_scores={name: out.get("token_scores") for name, out in row["metrics"].items()},
            words={name: out["words"] for name, out in row["metrics"].items() if out.get("words") is not None},
        )


# ---------------------------------------------------------------- statistics

def kendall(scores, human, variant: str) -> float:
    """scipy's Kendall tau (variant "b" or "c"), as PAC-S's compute_correlations.py calls it."""
    from scipy.stats import kendalltau

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
    from capscope.bench.evaluate import figures_of, predict_many, word_scale_of

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

    from capscope.bench.gold import collect_tokens

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

    from capscope.bench.gold import collect_tokens

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

DENSE_BENCHMARKS = ("foil", "nocaps-foil", "hat")
DENSE_METRICS = ("clip4dm", "clip-s")
F_CLIP_S, CLIP4DM_CLIP_S, CLIP_S = "clip4dm.f_clip_s", "clip4dm.clip_s", "clip-s.clip_s"
PUBLISHED_KEY = {CLIP4DM_CLIP_S: CLIP_S}   # CLIP-S from clip4dm's own pass is the paper's CLIPScore too
READINGS = {"foil": "most_negative", "nocaps-foil": "most_negative", "hat": "threshold"}
DENSE_PROTOCOLS = {
    "most_negative": "CLIP4DM main.py, most-negative reading: clip4dm's lowest-scored word (punctuation kept, the "
                     "first on ties) is found when, lowercased and stripped, it equals the foil word; LA = found / "
                     "foil captions; AP with the originals positive, ranked by F-CLIPScore = that word's attribution "
                     "x (1 - CLIP-S / 2.5) and by CLIP-S",
    "threshold": "CLIP4DM main.py, threshold reading: punctuation words dropped, the rest numbered, those below "
                 "epsilon grouped in runs of consecutive numbers (words joined, lowercased; score = their mean); "
                 "the lowest run is found when it is a substring of the hallucinated words (less '.' and ','; "
                 "joined, lowercased); none below epsilon: not found, attribution 0; LA = found / captions with a "
                 "hallucination; AP with those captions positive, ranked by -F-CLIPScore (the lowest run's score "
                 "x (1 - CLIP-S / 2.5)) and by -CLIP-S",
}
DENSE_CAPTIONS = {
    "foil": "every caption of the file, a clean caption once however many foils share it",
    "nocaps-foil": "both captions of every entry (foil word replacement[1]), per domain too",
    "hat": "every caption",
}


def most_negative(words: list[dict]) -> tuple[str, float] | None:
    """FOIL's reading: the word with the lowest score (punctuation kept), the
    first of equal ones as Python's stable sort gives; None without words."""
    if not words:
        return None
    lowest = min(words, key=lambda w: w["score"])
    return lowest["text"], lowest["score"]


def is_foil_word(predicted: str, foil_word: str) -> bool:
    """main.py's comparison: both stripped and lowercased, then equal (it keeps
    what follows the last "_" of the prediction, a leftover of its word indices)."""
    return predicted.strip().lower().split("_")[-1] == foil_word.strip().lower()


def negative_runs(words: list[dict], epsilon: float) -> list[tuple[str, float]]:
    """HAT's reading: the words left once punctuation is dropped (the released
    substring test), numbered in that order; those scoring below `epsilon`
    grouped into runs of consecutive numbers, each (its words joined by spaces,
    lowercased; the mean of their scores)."""
    from capscope.metrics.clip4dm import is_punctuation

    runs, last = [], None
    for number, word in enumerate(w for w in words if not is_punctuation(w["text"])):
        if word["score"] >= epsilon:
            continue
        if last == number - 1:
            runs[-1].append(word)
        else:
            runs.append([word])
        last = number
    return [(" ".join(w["text"] for w in run).lower(), sum(w["score"] for w in run) / len(run)) for run in runs]


def lowest_run(words: list[dict], epsilon: float) -> tuple[str, float] | None:
    """The run with the lowest score, the first of equal ones; None when no word is below `epsilon`."""
    runs = negative_runs(words, epsilon)
    return min(runs, key=lambda run: run[1]) if runs else None


def hat_answer(hallucinated_words: list[str]) -> str:
    """What HAT's reading must find: the flagged words less "." and ",", joined, lowercased."""
    return " ".join(w.replace(".", "").replace(",", "") for w in hallucinated_words).strip().lower()


def read_words(words: list[dict], reading: str, epsilon: float, answer: str | None) -> tuple[bool, float]:
    """(whether the reading finds the misaligned word, the attribution F-CLIPScore takes).
    `answer`: the foil word, HAT's answer, or None for an original caption."""
    hit = most_negative(words) if reading == "most_negative" else lowest_run(words, epsilon)
    if hit is None:
        return False, 0.0
    if not answer:
        return False, hit[1]
    return (is_foil_word(hit[0], answer) if reading == "most_negative" else hit[0] in answer), hit[1]


def f_clip_score(attribution: float, clip_s: float) -> float:
    from capscope.metrics.clipscore import CLIP_S_WEIGHT

    return attribution * (1 - clip_s / CLIP_S_WEIGHT)


@dataclass
class DenseCaption:
    """One caption as a CLIP4DM protocol reads it."""
    group: str                                  # the image: the bootstrap resamples these
    domain: str                                 # nocaps-FOIL's domain, else ""
    misaligned: bool                            # a foil, or a caption with a hallucinated word
    found: bool = False                         # clip4dm's reading found the misaligned word
    values: dict[str, float] = field(default_factory=dict)   # key -> the score AP ranks by


def dense_caption(group: str, domain: str, answer: str | None, words: list | None, scores: dict,
                  reading: str, epsilon: float) -> DenseCaption:
    """A caption read from its scores ("<metric>.<key>") and clip4dm's words
    (None when clip4dm did not score it)."""
    caption = DenseCaption(group, domain, bool(answer and answer.strip()))
    if words is not None and CLIP4DM_CLIP_S in scores:
        caption.found, attribution = read_words(words, reading, epsilon, answer)
        caption.values[F_CLIP_S] = f_clip_score(attribution, scores[CLIP4DM_CLIP_S])
    caption.values.update({key: scores[key] for key in (CLIP_S, CLIP4DM_CLIP_S) if key in scores})
    return caption


def pair_dense_captions(loaded, scored: dict, reading: str, epsilon: float) -> list[DenseCaption]:
    """The captions CLIP4DM's datasets list: FOIL's file has each clean caption once
    beside its foils (a clean caption of several pairs counts once); nocaps-FOIL
    gives both captions of every entry. Pairs whose file names no foil word are left out."""
    out, seen = [], set()
    for pair in loaded.rows:
        if pair.foil_word is None:
            continue
        refs = tuple((pair.reference_draws or [[]])[0])
        domain = pair.category if loaded.benchmark == "nocaps-foil" else ""
        foil, clean = pair.captions[1 - pair.preferred], pair.captions[pair.preferred]
        for caption, answer in ((foil, pair.foil_word), (clean, None)):
            candidate = Candidate(Path(pair.image), caption, refs)
            if candidate not in scored or (loaded.benchmark == "foil" and answer is None and candidate in seen):
                continue
            seen.add(candidate)
            s = scored[candidate]
            out.append(dense_caption(pair.group, domain, answer, s.words.get("clip4dm"), s.scores, reading, epsilon))
    return out


def token_dense_captions(items: list[dict], predicted: dict, epsilon: float) -> list[DenseCaption]:
    """HAT's captions read from `predict_many`'s outputs (an item no metric scored is left out)."""
    out = []
    for index, item in enumerate(items):
        outputs = {metric: predictions[index] for metric, (predictions, _) in predicted.items() if predictions[index]}
        if not outputs:
            continue
        scores = {f"{metric}.{key}": value for metric, output in outputs.items()
                  for key, value in output.get("scores", {}).items()}
        out.append(dense_caption(str(item["image"]), "", hat_answer(item.get("hallucinated_words", [])),
                                 outputs.get("clip4dm", {}).get("words"), scores, "threshold", epsilon))
    return out


def average_precision(labels, ranked) -> float:
    """sklearn's average precision; NaN unless both classes are present."""
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(labels, ranked)) if 0 < labels.sum() < len(labels) else math.nan


def dense_figures(captions: list[DenseCaption], key: str, originals_positive: bool, draws: int, seed: int) -> dict:
    """AP of `key` (and, for F-CLIPScore, clip4dm's LA) over the captions that
    have it, each with its bootstrap interval over images (the same draws)."""
    kept = [c for c in captions if key in c.values]
    misaligned = np.array([c.misaligned for c in kept], bool)
    values = np.array([c.values[key] for c in kept], float)
    labels, ranked = (~misaligned, values) if originals_positive else (misaligned, -values)
    groups, everything = [c.group for c in kept], np.arange(len(kept))
    ap = lambda idx: average_precision(labels[idx], ranked[idx])
    figures = {"n": len(kept), "n_misaligned": int(misaligned.sum()), "LA": None, "LA_ci95": None,
               "AP": ap(everything), "AP_ci95": bootstrap_interval(ap, groups, draws, seed)}
    if key == F_CLIP_S:
        found = np.array([c.found for c in kept], bool)
        la = lambda idx: float(found[idx][misaligned[idx]].mean()) if misaligned[idx].any() else math.nan
        figures.update(LA=la(everything), LA_ci95=bootstrap_interval(la, groups, draws, seed))
    return figures


def dense_published(benchmark: str, key: str, figures: dict, clip: str) -> list[dict]:
    """The published rows for this key, each with its backbone; a verdict per
    statistic only beside a value measured with the CLIP scored here."""
    rows: dict[str, dict] = {}
    for statistic in ("LA", "AP"):
        for entry in pub.lookup(benchmark, statistic, PUBLISHED_KEY.get(key, key)):
            row = rows.setdefault(entry.row, {"row": entry.row, "backbone": entry.backbone,
                                              "source": entry.source.cite(),
                                              "same_backbone": pub.same_backbone(entry, clip),
                                              "LA": None, "AP": None, "difference": {}, "reproduced": {}})
            row[statistic] = entry.value
            measured, interval = figures.get(statistic), figures.get(f"{statistic}_ci95")
            if row["same_backbone"] and measured is not None and math.isfinite(measured):
                row["difference"][statistic] = measured - entry.value
                row["reproduced"][statistic] = interval[0] <= entry.value <= interval[1] if interval else None
    return list(rows.values())


def dense_keys(captions: list[DenseCaption]) -> list[str]:
    """F-CLIPScore, and CLIP-S: clip-s's where it was scored, else clip4dm's own."""
    present = {key for c in captions for key in c.values}
    return [key for key in (F_CLIP_S, CLIP_S if CLIP_S in present else CLIP4DM_CLIP_S) if key in present]


def dense_section(benchmark: str, captions: list[DenseCaption], model: dict, draws: int, seed: int) -> dict:
    """CLIP4DM's figures on this benchmark, overall and (nocaps-FOIL) per domain."""
    reading = READINGS[benchmark]
    originals_positive = reading == "most_negative"
    clip = model.get("clip") or ""
    metrics = {}
    for key in dense_keys(captions):
        figures = dense_figures(captions, key, originals_positive, draws, seed)
        metrics[key] = dict(figures, published=dense_published(benchmark, key, figures, clip))
    domains = {domain: {key: dense_figures([c for c in captions if c.domain == domain], key, originals_positive,
                                           draws, seed) for key in dense_keys(captions)}
               for domain in sorted({c.domain for c in captions if c.domain})}
    return {"reading": reading, "protocol": f"{DENSE_CAPTIONS[benchmark]}; {DENSE_PROTOCOLS[reading]}",
            "clip": clip, "epsilon": dense_epsilon(model),
            "n": len(captions), "n_misaligned": sum(c.misaligned for c in captions),
            "metrics": metrics, "domains": domains}


def dense_epsilon(model: dict) -> float | None:
    """The epsilon clip4dm's rows were scored with (None when clip4dm did not score)."""
    return ((model.get("metric_options") or {}).get("clip4dm") or {}).get("epsilon")


def wants_dense(loaded, metrics: list[str]) -> bool:
    return loaded.benchmark in DENSE_BENCHMARKS and any(m in DENSE_METRICS for m in metrics)


# ---------------------------------------------------------------- the whole run

@dataclass
class Outcome:
    result: dict                      # what `capscope correlate --json` prints
    problems: list[str]               # loading and scoring problems, one per row
    points: dict = field(default_factory=dict)   # key -> (human or preferred, metric or other) for the plot


def correlate(loaded, scorer, metrics: list[str], *, batch_size: int = 32, bootstrap: int = 1000, seed: int = 0,
              token_rule: str = "paper", beta: float = 0.1, progress: bool = True) -> Outcome:
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

def format_result(result: dict) -> str:
    if result["kind"] == "token":
        lines = [format_tokens(result)]
    else:
        lines = [header(result), *(rating_lines(result) if result["kind"] == "rating" else pair_lines(result))]
    for metric, figures in result.get("foil_word", {}).items():
        lines.append(f"  {metric}: lowest-scored word is the foil word in {100 * figures['lowest_word_is_foil']:.1f}% "
                     f"of {figures['n']} foil captions")
    if result.get("dense"):
        lines += dense_lines(result)
    if result["kind"] != "token" or result.get("dense"):
        lines += source_lines(result)
    return "\n".join(lines)


def header(result: dict) -> str:
    boot = result["bootstrap"]
    unit = "judgements" if result["kind"] == "rating" else "pairs"
    chosen = {"tau_b": "Kendall tau_b", "tau_c": "Kendall tau_c", "pearson": "Pearson"}.get(result.get("statistic"),
                                                                                           "accuracy")
    return (f"{result['benchmark']}: {result['n']} {unit}; the papers' statistic: {chosen} (*); x100; "
            f"95% interval: percentile bootstrap over images, {boot['draws']} draws, seed {boot['seed']}\n"
            f"  protocol: {result['protocol']}")


def pct(value, width: int = 6) -> str:
    return f"{'-':>{width}}" if value is None else f"{100 * value:{width}.1f}"


def interval_text(ci) -> str:
    return f"{'-':>14}" if not ci else f"[{100 * ci[0]:5.1f}, {100 * ci[1]:5.1f}]"


def verdict(figures: dict) -> str:
    if figures.get("baseline"):
        return "trivial baseline"
    if figures.get("published") is None:
        return ""
    if figures.get("reproduced"):
        return "reproduced"
    diff = figures.get("difference")
    return "" if diff is None else f"{100 * diff:+.1f}"


def published_text(figures: dict, numbers: dict) -> str:
    if figures.get("published") is None:
        return f"{'-':>10}"
    return f"{pct(figures['published'])} [{numbers[figures['published_source']]}]".rjust(10)


def source_numbers(result: dict) -> dict:
    return {cite: i + 1 for i, cite in enumerate(result.get("sources", []))}


# (prefix, alignment, width) per column: the CLI pads the cells of `table` with these
_RATING_LAYOUT = [("", "<", 26), ("", ">", 7), ("  ", ">", 8), ("  ", ">", 8), ("  ", ">", 8),
                  ("  ", ">", 14), ("  ", ">", 10), ("  ", "<", 0)]
_PAIR_LAYOUT = [("", "<", 26), ("", ">", 7), ("  ", ">", 6), ("  ", ">", 14), ("  ", ">", 10), ("  ", "<", 0)]
_CATEGORY_COLUMN = ("", ">", 7)


def table(result: dict) -> tuple[list[str], list[list[str]]]:
    """The correlation table of a rating or pairwise result, cell by cell (x100,
    the papers' statistic starred, published value with its source number, the
    verdict): the CLI pads the cells into columns, the web UI shows them as they are."""
    return rating_table(result) if result["kind"] == "rating" else pair_table(result)


def rating_table(result: dict) -> tuple[list[str], list[list[str]]]:
    numbers = source_numbers(result)
    names = ("tau_b", "tau_c", "pearson")
    header = ["score", "n", *(s + ("*" if s == result["statistic"] else "") for s in names), "95% CI", "published",
              "verdict"]
    rows = [[key, str(f["n"]), *(pct(f.get(s)).strip() for s in names), interval_text(f["ci95"]).strip(),
             published_text(f, numbers).strip(), verdict(f)] for key, f in result["metrics"].items()]
    return header, rows


def pair_table(result: dict) -> tuple[list[str], list[list[str]]]:
    numbers = source_numbers(result)
    categories = CATEGORIES if result["benchmark"] == "pascal-50s" else ()
    header = ["score", "n", *categories, "acc*", "95% CI", "published", "verdict"]
    rows = [[key, str(f["n"]), *(pct(f.get("categories", {}).get(c, {}).get("accuracy")).strip() for c in categories),
             pct(f["accuracy"]).strip(), interval_text(f["ci95"]).strip(), published_text(f, numbers).strip(),
             verdict(f)] for key, f in result["metrics"].items()]
    return header, rows


def padded(cells: list[str], layout: list[tuple[str, str, int]]) -> str:
    return "  " + "".join(f"{prefix}{cell:{align}{width}}" for cell, (prefix, align, width) in zip(cells, layout))


def rating_lines(result: dict) -> list[str]:
    header, rows = rating_table(result)
    return [padded(cells, _RATING_LAYOUT) for cells in (header, *rows)]


def pair_lines(result: dict) -> list[str]:
    header, rows = pair_table(result)
    layout = _PAIR_LAYOUT[:2] + [_CATEGORY_COLUMN] * (len(header) - len(_PAIR_LAYOUT)) + _PAIR_LAYOUT[2:]
    lines = [padded(cells, layout) for cells in (header, *rows)]
    settings = {f["setting"] for f in result["metrics"].values() if f.get("setting")}
    if settings:
        lines.insert(0, f"  published column: accuracy with {', '.join(sorted(settings))} (references per pair)")
    return lines


_DENSE_LAYOUT = [("", "<", 34), ("", ">", 5), ("  ", ">", 6), ("  ", ">", 14), ("  ", ">", 6), ("  ", ">", 14)]


def dense_lines(result: dict) -> list[str]:
    """The dense-misalignment table: each key's LA and AP with their intervals,
    the published rows under it (a verdict only where the paper's CLIP is the
    one scored here), then nocaps-FOIL's domains."""
    dense, numbers = result["dense"], source_numbers(result)
    epsilon = "" if dense["epsilon"] is None else f", epsilon {dense['epsilon']:g}"
    lines = [f"  dense misalignment (CLIP4DM), {dense['reading'].replace('_', '-')} reading: {dense['n']} captions, "
             f"{dense['n_misaligned']} misaligned; CLIP {dense['clip'] or 'unknown'}{epsilon}; x100",
             f"    protocol: {dense['protocol']}",
             padded(["score / published row", "n", "LA", "95% CI", "AP", "95% CI"], _DENSE_LAYOUT)]
    for key, figures in dense["metrics"].items():
        lines.append(padded(dense_cells(key, figures), _DENSE_LAYOUT))
        for row in figures["published"]:
            label = f"  {row['row']} [{numbers[row['source']]}]"
            lines.append(padded([label, "", pct(row["LA"]).strip(), dense_verdict(row, "LA"), pct(row["AP"]).strip(),
                                 dense_verdict(row, "AP")], _DENSE_LAYOUT))
    for domain, keys in dense["domains"].items():
        lines += [padded(dense_cells(f"{domain}: {key}", figures), _DENSE_LAYOUT) for key, figures in keys.items()]
    lines.append("  published rows: the verdict ('reproduced' inside the 95% interval, else measured - published) "
                 "only where the paper's backbone is the CLIP scored here")
    return lines


def dense_cells(label: str, figures: dict) -> list[str]:
    return [label, str(figures["n"]), pct(figures["LA"]).strip(), interval_text(figures["LA_ci95"]).strip(),
            pct(figures["AP"]).strip(), interval_text(figures["AP_ci95"]).strip()]


def dense_verdict(row: dict, statistic: str) -> str:
    if statistic not in row["difference"]:
        return ""
    return "reproduced" if row["reproduced"].get(statistic) else f"{100 * row['difference'][statistic]:+.1f}"


def source_lines(result: dict) -> list[str]:
    if not result.get("sources"):
        return ["  published: none of these keys has a published value on this benchmark"]
    lines = ["  published values (verdict: 'reproduced' when inside the 95% interval, else measured - published):"]
    if result.get("demo"):
        lines.insert(0, "  DEMO MODEL: the published values are the papers' released models on the real benchmark; "
                        "beside demo scores they compare nothing")
    return lines + [f"  [{i + 1}] {cite}" for i, cite in enumerate(result["sources"])]


def format_tokens(result: dict) -> str:
    from capscope.bench.evaluate import format_figures

    lines = [f"{result['benchmark']}: {result['n']} items\n  protocol: {result['protocol']}"]
    for metric, figures in result["metrics"].items():
        lines.append(format_figures(figures))
        ap, ci = figures.get("average_precision"), figures.get("average_precision_ci95")
        interval = f" (95% interval {ci[0]:.3f} to {ci[1]:.3f})" if ci else ""
        lines.append(f"  average precision of incorrect words {'n/a' if ap is None else f'{ap:.3f}'}{interval}")
        if figures.get("pos") is None:
            lines.append(f"  {figures['pos_note']}")
            continue
        for tag, row in figures["pos"].items():
            ap = "n/a" if row["average_precision"] is None else f"{row['average_precision']:.3f}"
            lines.append(f"    {tag:<6} n {row['n']:>5}  incorrect {row['incorrect']:>4}  "
                         f"accuracy {row['accuracy']:.3f}  AP {ap}")
    return "\n".join(lines)
