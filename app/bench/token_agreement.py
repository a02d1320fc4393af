"""Token benchmarks (HAT, CapTokenEval) for `capscope correlate`: the figures
of `capscope evaluate`, the average precision of "incorrect" with its
bootstrap interval over images, and a per-part-of-speech breakdown."""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from capscope.bench.evaluate import figures_of, predict_many, word_scale_of
from capscope.bench.gold_figures import collect_tokens
from capscope.common.stats import bootstrap_interval


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
