"""A caption's words shaded by a metric's verdicts, as every tab shows them
(Inspect, Annotate's suggestions, Explore): the segments a caption splits into,
token by token, and the red/purple shade of each."""
from __future__ import annotations

from capscope.metrics.constants import BETA
from capscope.metrics.registry import SPECS, metric_names
from capscope.metrics.verdict import word_cuts


SHADE_LEGEND = ("<small>**Word shades**, the bar under the words running −1 … 0 … +1: "
                "🟪 **purple, toward −1**: the metric finds the word in the picture (deeper: further past its cut); "
                "🟥 **red, toward +1**: not supported, a likely wrong word (+0.6 or more once judged wrong); "
                "no shade: not judged (stop words, punctuation).</small>")


def decision_threshold(metric: str, result: dict | None = None) -> float:
    """The one cut of a metric that does not follow the token rule: the one its
    result reports (HICE-S's `features.threshold`), else its registry default.
    The token rule's metrics cut each word where the row says (`word_cuts`)."""
    reported = ((result or {}).get("features") or {}).get("threshold")
    if reported is not None:
        return float(reported)
    spec = SPECS.get(metric)
    return spec.threshold if spec and spec.threshold is not None else BETA


def token_metrics() -> tuple[str, ...]:
    """The metrics that judge words, in registry order (the first is shown by default)."""
    return metric_names(kind="token")


def token_shade(score: float | None, correct: bool | None, threshold: float) -> float | None:
    """HighlightedText score-mode value: red (> 0) for unsupported words, purple
    (< 0) for supported ones, None for words the metric does not judge."""
    if score is None or correct is None:
        return None
    value = max(-1.0, min(1.0, (threshold - score) / (abs(threshold) or 1.0)))  # CLIP4DM's cut is negative
    if correct is False:
        return max(value, 0.6)
    return min(value * 0.7, -0.1)


def token_segments(caption: str, tokens: list[dict]) -> list[str]:
    """Each token's text with the whitespace before it, so that the segments
    join back into the caption and segment i is token i."""
    segments, previous_end = [], 0
    for token in tokens:
        segments.append(caption[previous_end:token["end"]])
        previous_end = token["end"]
    if segments and previous_end < len(caption):
        segments[-1] += caption[previous_end:]
    return segments


def shaded_tokens(row: dict | None, metric: str) -> list[tuple[str, float | None]]:
    if not row:
        return []
    result = row["metrics"].get(metric) or {}
    segments = token_segments(row["caption"], row["tokens"])
    scores = result.get("token_scores") or [None] * len(segments)
    correct = result.get("token_correct") or [None] * len(segments)
    cuts = word_cuts(row, metric) or [decision_threshold(metric, result)] * len(segments)
    return [(text, token_shade(s, c, cut)) for text, s, c, cut in zip(segments, scores, correct, cuts)]


def wrong_words(row: dict | None, metric: str) -> list[str]:
    if not row:
        return []
    correct = (row["metrics"].get(metric) or {}).get("token_correct") or []
    return [t["text"] for t, c in zip(row["tokens"], correct) if c is False]
