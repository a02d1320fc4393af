"""Word and region verdicts from scores, the one rule every package uses (the
metrics, Annotate's suggestions, the queue's uncertainty, fine-tuning, the
evaluation): a word's score is the sum of its BPE pieces' shares, and a
semantic word is correct above the token rule's threshold; a region is
mentioned above the same rule's threshold for regions."""
from __future__ import annotations

from .text import Piece, Token


def decide_words(token_rule: str, beta: float, semantic: list[bool], scores: list[float | None],
                 scale: float = 1.0) -> list[bool | None]:
    """token_correct from word scores: a semantic word with a score is correct
    above the rule's threshold (times the checkpoint's `scale`); other words are
    not judged (None). A word has a score exactly when the model saw one of its
    pieces, so the words seen are the semantic words with a score."""
    seen = sum(1 for sem, s in zip(semantic, scores) if sem and s is not None)
    threshold = word_threshold(token_rule, beta, seen, scale)
    return [(s > threshold) if (sem and s is not None) else None for sem, s in zip(semantic, scores)]


def word_threshold(token_rule: str, beta: float, n_seen: int, scale: float = 1.0) -> float:
    """The share a semantic word must exceed to be correct, given the number of
    semantic words the model saw (those with a score), times `scale`: 1 but for
    a fine-tuned checkpoint that fitted it on its labels (`word_threshold_scale`).

    `paper`: β = 0.1 (InfoMetIC sec. 3.3). `relative`: half the share a word
    would get if attention were uniform over the n semantic words seen (β·5/n,
    so 0.05 for ten words), never above β. The paper's β flags every word of a
    caption with more than ten semantic words, and a threshold at the uniform
    share itself (1/n) splits a clean caption's words at random, since training
    (eq. 9) drives their shares towards exactly 1/n."""
    if token_rule == "paper" or n_seen == 0:
        return beta * scale
    return min(beta, beta * 5 / n_seen) * scale


def region_threshold(rule: str, beta: float, n_regions: int) -> float:
    """The share a region must exceed to be mentioned, given how many regions
    share the model's softmax (InfoMetIC's region scores, with the null token,
    sum to one). `paper`: β = 0.1 (InfoMetIC sec. 3.3). `relative` (the same
    rule as words'): half the share a region would get if attention were uniform
    over the n regions (β·5/n), never above β. The paper's β was set for the
    detector's handful of kept regions; at 15 regions a caption naming every
    object left each of them under 0.1, so every region read "left out"."""
    if rule == "paper" or n_regions == 0:
        return beta
    return min(beta, beta * 5 / n_regions)


def decide_regions(rule: str, beta: float, scores: list[float]) -> list[bool]:
    """region_mentioned from region scores, by `rule` (the row's token rule names it too)."""
    threshold = region_threshold(rule, beta, len(scores))
    return [s > threshold for s in scores]


def word_scores(tokens: list[Token], pieces: list[Piece], piece_scores: list[float]) -> list[float | None]:
    """A word's score is the sum of its pieces' softmax shares (None when the
    model saw none of its pieces, e.g. past the 30-piece limit)."""
    out: list[float | None] = [None] * len(tokens)
    for piece, score in zip(pieces, piece_scores):
        if piece.token is not None:
            out[piece.token] = (out[piece.token] or 0.0) + score
    return out
