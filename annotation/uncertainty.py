"""How unsure a model is of an item's verdicts: what the queue's `uncertainty`
order ranks by and Explore's uncertainty column shows, 0..1 (1: a coin toss).

The InfoMetIC family decides a word by its share of the text attention against
the word threshold for its caption and a region by its share against the region
threshold: the `metrics.verdict.Verdict` of the token rule each caller names
(no default: the server's, a command's flag, the rule a score row records).
Each verdict's probability is read as sigmoid(SHARPNESS * ln(share / threshold)),
the same logistic fine-tuning trains (capscope.train.finetune.losses, share_loss),
and an item's uncertainty is the mean binary entropy, in bits, of its semantic words' and its regions' verdicts.
A share is a ratio scale: a word at half its threshold is as sure as one at
twice it, however long the caption.

Other metrics (HICE-S's cosines, CLIP4DM's differences) keep a linear
closeness to their own threshold (`token_uncertainty`).
"""
from __future__ import annotations

import math
from typing import Sequence

from capscope.common.limits import finite_number
from capscope.metrics.constants import BETA
from capscope.metrics.registry import SPECS
from capscope.metrics.verdict import Verdict

SHARPNESS = 2.0
TINY = 1e-12


def verdict_probability(share: float, threshold: float) -> float:
    """How likely a verdict is positive (a word correct, a region mentioned):
    sigmoid(SHARPNESS * ln(share / threshold)), 0.5 on the threshold."""
    return 1.0 / (1.0 + (max(share, TINY) / threshold) ** -SHARPNESS)


def verdict_entropy(share: float, threshold: float) -> float:
    """The binary entropy (bits) of one verdict: 1 on the threshold, towards 0 far from it."""
    p = verdict_probability(share, threshold)
    if p <= 0.0 or p >= 1.0:
        return 0.0
    return -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def share_uncertainty(token_scores: Sequence, region_scores: Sequence, semantic: Sequence[bool] | None,
                      verdict: Verdict) -> float | None:
    """Mean verdict entropy over the semantic words with a score (every scored
    word when `semantic` is unknown), against `verdict`'s word threshold, and
    the regions with a score, against its region threshold."""
    words = scored_words(token_scores, semantic)
    regions = [s for s in region_scores if finite_number(s)]
    if not words and not regions:
        return None
    threshold, region_cut = verdict.threshold(len(words)), verdict.region_threshold(len(regions))
    values = [verdict_entropy(s, threshold) for s in words] + [verdict_entropy(s, region_cut) for s in regions]
    return sum(values) / len(values)


def metric_verdict(metric: str, token_rule: str, word_scale: float) -> Verdict:
    """The rule a metric of the token rule decides by: `token_rule` at its registry β, words times `word_scale`."""
    spec = SPECS.get(metric)
    return Verdict(token_rule, spec.threshold if spec is not None and spec.threshold is not None else BETA, word_scale)


def scored_words(token_scores: Sequence, semantic: Sequence[bool] | None = None) -> list[float]:
    """The shares of the semantic words with a score (every scored word when `semantic` is unknown)."""
    flags = list(semantic) if semantic is not None else [True] * len(token_scores)
    return [s for s, sem in zip(token_scores, flags) if sem and finite_number(s)]


def token_uncertainty(scores: Sequence, threshold: float = BETA) -> float | None:
    """Mean closeness of the scores to a threshold (1 = on it), on the
    threshold's own scale (HICE-S's 0.2 and CLIP4DM's -5e-5 alike)."""
    values = [s for s in scores if finite_number(s)]
    if not values:
        return None
    scale = abs(threshold) or 1.0
    return sum(math.exp(-abs(s - threshold) / scale) for s in values) / len(values)


def prediction_uncertainty(metric: str, token_scores: Sequence | None, region_scores: Sequence | None,
                           semantic: Sequence[bool] | None, token_rule: str, word_scale: float) -> float | None:
    """One stored prediction's uncertainty: `share_uncertainty` under `token_rule`
    (words times `word_scale`) for a metric that follows the token rule, else
    `token_uncertainty` at its threshold."""
    spec = SPECS.get(metric)
    if spec is not None and spec.follows_token_rule:
        return share_uncertainty(token_scores or [], region_scores or [], semantic,
                                 metric_verdict(metric, token_rule, word_scale))
    threshold = spec.threshold if spec is not None and spec.threshold is not None else BETA
    return token_uncertainty(list(token_scores or []) + list(region_scores or []), threshold)


def verdict_probabilities(metric: str, token_scores: Sequence | None, region_scores: Sequence | None,
                          semantic: Sequence[bool] | None, token_rule: str, word_scale: float
                          ) -> tuple[list, list] | None:
    """A prediction's P(incorrect) per word (None: not a semantic word with a
    score) and P(mentioned) per region, for a metric that follows the token
    rule (the verdicts `share_uncertainty` measures); None for other metrics."""
    spec = SPECS.get(metric)
    if spec is None or not spec.follows_token_rule:
        return None
    verdict = metric_verdict(metric, token_rule, word_scale)
    tokens, regions = list(token_scores or []), list(region_scores or [])
    flags = list(semantic) if semantic is not None else [True] * len(tokens)
    threshold = verdict.threshold(len(scored_words(tokens, flags)))
    region_cut = verdict.region_threshold(len([s for s in regions if finite_number(s)]))
    words = [1.0 - verdict_probability(s, threshold) if sem and finite_number(s) else None
             for s, sem in zip(tokens, flags)]
    return words, [verdict_probability(s, region_cut) if finite_number(s) else None for s in regions]
