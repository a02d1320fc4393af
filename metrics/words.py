"""Word scores from piece scores, and the verdict functions of before, kept
for their import path: each is `verdict.Verdict`'s, which decides for every
package (the metrics, Annotate's suggestions, the queue's uncertainty,
fine-tuning, the evaluation)."""
from __future__ import annotations

from .text import Piece, Token
from .verdict import Verdict


def decide_words(token_rule: str, beta: float, semantic: list[bool], scores: list[float | None],
                 word_scale: float) -> list[bool | None]:
    """`Verdict.decide`: token_correct from word scores."""
    return Verdict(token_rule, beta, word_scale).decide(semantic, scores)


def word_threshold(token_rule: str, beta: float, n_seen: int, word_scale: float) -> float:
    """`Verdict.threshold`: the share a semantic word must exceed to be correct."""
    return Verdict(token_rule, beta, word_scale).threshold(n_seen)


def region_threshold(token_rule: str, beta: float, n_regions: int) -> float:
    """`Verdict.region_threshold`: the share a region must exceed to be mentioned."""
    return Verdict(token_rule, beta, 1.0).region_threshold(n_regions)


def decide_regions(token_rule: str, beta: float, scores: list[float]) -> list[bool]:
    """`Verdict.decide_regions`: region_mentioned from region scores."""
    return Verdict(token_rule, beta, 1.0).decide_regions(scores)


def word_scores(tokens: list[Token], pieces: list[Piece], piece_scores: list[float]) -> list[float | None]:
    """A word's score is the sum of its pieces' softmax shares (None when the
    model saw none of its pieces, e.g. past the 30-piece limit)."""
    out: list[float | None] = [None] * len(tokens)
    for piece, score in zip(pieces, piece_scores):
        if piece.token is not None:
            out[piece.token] = (out[piece.token] or 0.0) + score
    return out
