"""CLIP4DM's dense-misalignment protocols, as its released main.py reads them
(FOIL, nocaps-FOIL, HAT): the localisation accuracy (LA) of clip4dm's word
reading and the average precision (AP) with which F-CLIPScore and CLIP-S tell
misaligned captions from the others (for `capscope correlate`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capscope.bench import published as pub
from capscope.bench.candidates import Candidate
from capscope.common.stats import bootstrap_interval

F_CLIP_S, CLIP4DM_CLIP_S, CLIP_S = "clip4dm.f_clip_s", "clip4dm.clip_s", "clip-s.clip_s"
DENSE_BENCHMARKS = ("foil", "nocaps-foil", "hat")


DENSE_METRICS = ("clip4dm", "clip-s")


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
    from capscope.metrics.clip4dm import is_punctuation  # torch loads when used: ui.benchmark imports this module

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
