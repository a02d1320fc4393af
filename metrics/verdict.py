"""The one rule that decides a word or a region for the metrics that follow
the token rule (`infometic`, `infoclip`), and the cut every tab shades by.

A word's score is the sum of its BPE pieces' shares; a semantic word is
correct above `threshold(n)`, n the number of semantic words the model saw
(those with a score). A region is mentioned above `region_threshold(n)`, n
the number of regions sharing the model's softmax. The `Scorer` builds one
`Verdict` from its `ScorerConfig`, each metric carries it (InfoMetIC at its
checkpoint's word scale), and every row writes it in its `model` block
(`model.verdict`, docs/formats.md §2.2), so that a reader of the row finds
the cut each word was decided at.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .constants import TOKEN_RULES


@dataclass(frozen=True)
class Verdict:
    """Attributes:
        token_rule: `relative` (β·5/n, never above β) or `paper` (β itself).
        beta: InfoMetIC's β (sec. 3.3).
        word_scale: what the word cut is multiplied by: 1 but for a fine-tuned
            checkpoint that fitted it on its labels (`word_threshold_scale`).
            Regions are not scaled.
    """

    token_rule: str
    beta: float
    word_scale: float

    def __post_init__(self):
        if self.token_rule not in TOKEN_RULES:
            raise ValueError(f"unknown token rule {self.token_rule!r}; choose from {TOKEN_RULES}")

    @classmethod
    def from_config(cls, config) -> Verdict:
        """The rule a `ScorerConfig` (or anything with `token_rule` and `beta`) asks for, at word scale 1."""
        return cls(config.token_rule, config.beta, 1.0)

    @classmethod
    def from_record(cls, record: dict) -> Verdict:
        """The rule as `record` wrote it (a row's `model.verdict[metric]`)."""
        return cls(record["token_rule"], float(record["beta"]), float(record["word_scale"]))

    def scaled(self, word_scale: float) -> Verdict:
        """The same rule with the word cut times `word_scale` (a checkpoint's fitted scale)."""
        return replace(self, word_scale=word_scale)

    def record(self) -> dict:
        """What a row's `model.verdict` says of the rule; `region_rule` names the region cut's rule."""
        return {"token_rule": self.token_rule, "region_rule": self.token_rule, "beta": self.beta,
                "word_scale": self.word_scale}

    def threshold(self, n_seen: int) -> float:
        """The share a semantic word must exceed to be correct, given the number
        of semantic words the model saw, times the word scale.

        `paper`: β = 0.1 (InfoMetIC sec. 3.3). `relative`: half the share a word
        would get if attention were uniform over the n semantic words seen (β·5/n,
        so 0.05 for ten words), never above β. The paper's β flags every word of a
        caption with more than ten semantic words, and a threshold at the uniform
        share itself (1/n) splits a clean caption's words at random, since training
        (eq. 9) drives their shares towards exactly 1/n."""
        return self._cut(n_seen) * self.word_scale

    def region_threshold(self, n_regions: int) -> float:
        """The share a region must exceed to be mentioned, given how many regions
        share the model's softmax (InfoMetIC's region scores, with the null token,
        sum to one); the same rule as words', unscaled. The paper's β was set for
        the detector's handful of kept regions; at 15 regions a caption naming every
        object left each of them under 0.1, so every region read "left out"."""
        return self._cut(n_regions)

    def _cut(self, n: int) -> float:
        if self.token_rule == "paper" or n == 0:
            return self.beta
        return min(self.beta, self.beta * 5 / n)

    def decide(self, semantic: list[bool], scores: list[float | None]) -> list[bool | None]:
        """token_correct from word scores: a semantic word with a score is correct
        above `threshold`; other words are not judged (None). A word has a score
        exactly when the model saw one of its pieces."""
        threshold = self.threshold(seen_words(semantic, scores))
        return [(s > threshold) if (sem and s is not None) else None for sem, s in zip(semantic, scores)]

    def decide_regions(self, scores: list[float]) -> list[bool]:
        """region_mentioned from region scores: above `region_threshold`."""
        threshold = self.region_threshold(len(scores))
        return [s > threshold for s in scores]


def seen_words(semantic: list[bool], scores: list[float | None]) -> int:
    """The semantic words the model saw: those with a score (the n of `Verdict.threshold`)."""
    return sum(1 for sem, s in zip(semantic, scores) if sem and s is not None)


def row_verdict(row: dict, metric: str) -> Verdict | None:
    """The rule `metric` decided the row's words with, as its `model.verdict`
    says; None when the row names none for it (a metric that does not follow
    the token rule, or a row written before capscope recorded it)."""
    record = ((row.get("model") or {}).get("verdict") or {}).get(metric)
    return Verdict.from_record(record) if record else None


def word_cuts(row: dict, metric: str) -> list[float | None] | None:
    """Per token of the row, the cut `metric` decided it at: the row's rule
    (`row_verdict`) at the number of semantic words seen in the window its
    verdict came from (`windows.owners` over the row's `windows`); None for a
    word not judged, and None for the whole row when it names no rule."""
    verdict = row_verdict(row, metric)
    if verdict is None:
        return None
    from .windows import owners  # not at the top: the registry imports this module, cheaply

    tokens, result = row["tokens"], row["metrics"].get(metric) or {}
    scores = result.get("token_scores") or [None] * len(tokens)
    semantic = [bool(t.get("semantic")) for t in tokens]
    spans = read_windows(tokens, result.get("windows"))
    seen = [seen_words(semantic[w.first : w.last + 1], scores[w.first : w.last + 1]) for w in spans]
    owner = owners(spans, len(tokens))
    return [verdict.threshold(seen[owner[t]]) if semantic[t] and scores[t] is not None else None
            for t in range(len(tokens))]


def read_windows(tokens: list[dict], offsets: list[list[int]] | None) -> list:
    """The row's `windows` ([start, end] character offsets) as `windows.Window`s
    over its tokens; one window of every token when the row names none."""
    from .windows import Window

    spans = [Window(*_token_range(tokens, start, end), start, end) for start, end in offsets or []]
    return [s for s in spans if s.first <= s.last] or [Window(0, max(len(tokens) - 1, 0), 0, 0)]


def _token_range(tokens: list[dict], start: int, end: int) -> tuple[int, int]:
    inside = [i for i, t in enumerate(tokens) if t["start"] >= start and t["end"] <= end]
    return (inside[0], inside[-1]) if inside else (1, 0)
