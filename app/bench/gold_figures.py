"""Figures of `capscope evaluate` (docs/formats.md §6): predictions against
CapTokenEval gold labels, with the trivial baselines on the same items.

Pure functions over plain data. A gold item is a CapTokenEval dict; a
prediction is a dict aligned with the item's own tokens and regions:
    {"token_scores": [float|None], "token_correct": [bool|None],
     "region_scores": [float|None], "region_mentioned": [bool|None]}
Token scores say how *correct* a token is (InfoMetIC: higher = more likely
right), so wrong-word AUROC ranks by the negated score. A labelled token the
prediction left undecided counts as predicted correct (and a labelled region
as unmentioned): the same call the trivial rule makes. AUROC uses only the
tokens/regions that got a score and is null when one class is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from capscope.common.stats import auroc, bootstrap_interval


@dataclass
class Judged:
    """Gold labels paired with one model's decisions and scores."""
    gold: list[bool] = field(default_factory=list)        # True = incorrect token / mentioned region
    decided: list[bool] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)


def collect_tokens(items: list[dict], predictions: list[dict]) -> Judged:
    judged = Judged()
    for item, pred in zip(items, predictions, strict=True):
        tokens = item["tokens"]
        scores = _aligned(pred.get("token_scores"), len(tokens), item["id"], "token_scores")
        correct = _aligned(pred.get("token_correct"), len(tokens), item["id"], "token_correct")
        for token, score, is_correct in zip(tokens, scores, correct):
            if not token.get("semantic") or token.get("label") is None:
                continue
            judged.gold.append(token["label"] == "incorrect")
            judged.decided.append(is_correct is False)
            judged.scores.append(None if score is None else -float(score))
    return judged


def collect_regions(items: list[dict], predictions: list[dict]) -> Judged:
    judged = Judged()
    for item, pred in zip(items, predictions, strict=True):
        regions = item["regions"]
        # a metric that judges no regions (CLIP4DM) reports empty lists: every region undecided
        scores = _aligned(pred.get("region_scores") or None, len(regions), item["id"], "region_scores")
        mentioned = _aligned(pred.get("region_mentioned") or None, len(regions), item["id"], "region_mentioned")
        for region, score, is_mentioned in zip(regions, scores, mentioned):
            if region.get("label") is None:
                continue
            judged.gold.append(region["label"] == "mentioned")
            judged.decided.append(is_mentioned is True)
            judged.scores.append(None if score is None else float(score))
    return judged


def _aligned(values, length: int, item_id: str, name: str) -> list:
    if values is None:
        return [None] * length
    if len(values) != length:
        raise ValueError(f"item {item_id}: {name} has {len(values)} entries for {length} gold entries")
    return list(values)


def accuracy(gold: list[bool], decided: list[bool]) -> float | None:
    if not gold:
        return None
    return sum(g == d for g, d in zip(gold, decided)) / len(gold)


def f1(gold: list[bool], decided: list[bool]) -> float | None:
    """F1 of the positive class; 0 when nothing is predicted or nothing is positive."""
    if not gold:
        return None
    return f1_of_counts(confusion_counts(gold, decided))


def confusion_counts(gold: list[bool], decided: list[bool]) -> tuple[int, int, int]:
    """(true positives, false positives, false negatives) of the positive class."""
    return (sum(g and d for g, d in zip(gold, decided)), sum(d and not g for g, d in zip(gold, decided)),
            sum(g and not d for g, d in zip(gold, decided)))


def f1_of_counts(counts) -> float:
    """F1 from (true positives, false positives, false negatives); 0 without a true positive."""
    tp, fp, fn = counts
    return 0.0 if tp == 0 else float(2 * tp / (2 * tp + fp + fn))


def f1_difference(items: list[dict], first: Sequence[list[dict]], second: Sequence[list[dict]] = (), *,
                  draws: int = 1000, seed: int = 0) -> dict:
    """The mean wrong-word F1 of the `first` models' predictions on `items`,
    less the mean F1 of the `second` models' (none: less 0), with its
    bootstrap 95% interval: each draw resamples whole images (an image's
    captions share its errors), the same rows for every model, so the interval
    of a difference is a paired one."""
    first_counts = [_word_counts(items, predictions) for predictions in first]
    second_counts = [_word_counts(items, predictions) for predictions in second]

    def difference(rows) -> float:
        def mean_f1(counts: list[np.ndarray]) -> float:
            return float(np.mean([f1_of_counts(c[rows].sum(axis=0)) for c in counts])) if counts else 0.0
        return mean_f1(first_counts) - mean_f1(second_counts)

    images = [str(item["image"]) for item in items]
    return {"value": difference(np.arange(len(items))), "ci95": bootstrap_interval(difference, images, draws, seed),
            "images": len(set(images))}


def _word_counts(items: list[dict], predictions: list[dict]) -> np.ndarray:
    """Per item, (true positives, false positives, false negatives) of its wrong-word verdicts."""
    counts = np.zeros((len(items), 3))
    for k, (item, prediction) in enumerate(zip(items, predictions, strict=True)):
        judged = collect_tokens([item], [prediction])
        counts[k] = confusion_counts(judged.gold, judged.decided)
    return counts


def evaluate(items: list[dict], predictions: list[dict], metric: str = "") -> dict:
    """The docs/formats.md §6 object, plus counts and the trivial rules beside it."""
    tokens = collect_tokens(items, predictions)
    regions = collect_regions(items, predictions)
    return {
        "metric": metric,
        "n_items": len(items),
        "text_accuracy": accuracy(tokens.gold, tokens.decided),
        "vision_accuracy": accuracy(regions.gold, regions.decided),
        "incorrect_token_f1": f1(tokens.gold, tokens.decided),
        "incorrect_token_auroc": auroc(tokens.gold, tokens.scores),
        "region_auroc": auroc(regions.gold, regions.scores),
        "n_tokens": len(tokens.gold),
        "n_incorrect_tokens": sum(tokens.gold),
        "n_regions": len(regions.gold),
        "n_mentioned_regions": sum(regions.gold),
        "trivial": trivial_baselines(tokens, regions),
    }


def trivial_baselines(tokens: Judged, regions: Judged) -> dict:
    """Every token correct, every region unmentioned, on the same items."""
    no_tokens = [False] * len(tokens.gold)
    no_regions = [False] * len(regions.gold)
    return {
        "text_accuracy": accuracy(tokens.gold, no_tokens),
        "vision_accuracy": accuracy(regions.gold, no_regions),
        "incorrect_token_f1": f1(tokens.gold, no_tokens),
        "incorrect_token_auroc": 0.5 if len(set(tokens.gold)) == 2 else None,
        "region_auroc": 0.5 if len(set(regions.gold)) == 2 else None,
    }


def foil_accuracy(items: list[dict], overall: dict[str, float]) -> dict:
    """Share of clean/polluted twins whose clean caption scores higher
    (ties count half). Items pair up through their `twin` and `polluted` fields."""
    by_id = {item["id"]: item for item in items}
    wins, pairs = 0.0, 0
    for item in items:
        if item.get("polluted") or "twin" not in item or item["twin"] not in by_id:
            continue
        clean, polluted = overall.get(item["id"]), overall.get(item["twin"])
        if clean is None or polluted is None:
            continue
        pairs += 1
        wins += 1.0 if clean > polluted else 0.5 if clean == polluted else 0.0
    return {"foil_accuracy": wins / pairs if pairs else None, "n_pairs": pairs}
