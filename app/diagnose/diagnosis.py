"""summary.json as typed objects (docs/formats.md §12): what the adding up
(`summary.Diagnosis.summary`) builds and `capscope.diagnose.diagnose_captioners`
returns. `to_dict` is summary.json, key for key and in its order;
`DiagnosisSummary.from_dict` reads a summary.json back."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

Interval = tuple  # (low, high), both None when there was nothing to resample


@dataclass(frozen=True)
class Estimate:
    mean: float | None
    ci95: Interval


@dataclass(frozen=True)
class WordRate:
    judged: int
    wrong: int
    wrong_rate: float | None
    ci95: Interval


@dataclass(frozen=True)
class ErrorType:
    judged: int
    wrong: int
    wrong_rate: float | None
    share_of_errors: float


@dataclass(frozen=True)
class WrongWord:
    word: str
    judged: int
    wrong: int
    wrong_rate: float
    examples: tuple[str, ...]


@dataclass(frozen=True)
class RegionCount:
    judged: int
    unmentioned: int
    unmentioned_rate: float | None


@dataclass(frozen=True)
class MetricSummary:
    scores: dict[str, Estimate]
    words: WordRate
    captions_with_wrong_word: float | None
    error_types: dict[str, ErrorType]
    top_wrong_words: tuple[WrongWord, ...]
    regions: RegionCount | None

    @property
    def dominant_error_type(self) -> str | None:
        """The kind of word with the most wrong words (None when none was wrong)."""
        kind, count = max(self.error_types.items(), key=lambda item: item[1].wrong, default=(None, None))
        return kind if count is not None and count.wrong else None


@dataclass(frozen=True)
class FailedRow:
    id: str | None
    error: str


@dataclass(frozen=True)
class ModelSummary:
    n_captions: int
    n_images: int
    n_errors: int
    metrics: dict[str, MetricSummary]
    failed: tuple[FailedRow, ...] = ()  # the first MAX_FAILED_LISTED rows that could not be scored


@dataclass(frozen=True)
class Provenance:
    """What scored the rows: capscope's version, whether the demo model did
    (any row), and each distinct `model` description the rows carry (CLIP,
    regions, text pipeline, token rule, precision, checkpoint ...)."""
    capscope: str
    demo: bool
    scorers: tuple[dict, ...]


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    metric: str
    key: str
    n_images: int
    mean_difference: float
    ci95: Interval
    a_wins: int
    b_wins: int
    ties: int

    @property
    def decided(self) -> bool:
        """Whether the 95% interval of a − b leaves out zero."""
        low, high = self.ci95
        return low is not None and (low > 0 or high < 0)


@dataclass(frozen=True)
class WordDifference:
    word: str
    a_judged: int
    a_wrong_rate: float
    b_judged: int
    b_wrong_rate: float
    difference: float


@dataclass(frozen=True)
class WordDifferences:
    a: str
    b: str
    metric: str
    words: tuple[WordDifference, ...]


@dataclass(frozen=True)
class NgramScores:
    scores: dict[str, float]
    unavailable: dict[str, str]
    n_captions: int


@dataclass(frozen=True)
class MetricWarning:
    """A metric whose verdicts look no better than chance on these captions (`test` names how that was found)."""
    metric: str
    test: str
    statistic: float
    n: int
    text: str


# summary.json's keys in the order it has always written them (ngram_scores, added last, is a field before
# provenance and warnings, which have defaults)
SUMMARY_KEYS = ("metrics", "type_source", "models", "comparisons", "word_differences", "provenance", "warnings",
                "ngram_scores")


@dataclass(frozen=True)
class DiagnosisSummary:
    metrics: tuple[str, ...]
    type_source: str
    models: dict[str, ModelSummary]
    comparisons: tuple[Comparison, ...]
    word_differences: tuple[WordDifferences, ...]
    ngram_scores: dict[str, NgramScores]
    provenance: Provenance | None = None
    warnings: tuple[MetricWarning, ...] = ()

    def comparison(self, a: str, b: str, metric: str, key: str) -> Comparison | None:
        return next((c for c in self.comparisons if (c.a, c.b, c.metric, c.key) == (a, b, metric, key)), None)

    @classmethod
    def from_dict(cls, data: dict) -> DiagnosisSummary:
        return cls(
            metrics=tuple(data["metrics"]), type_source=data["type_source"],
            models={name: _model(m) for name, m in data["models"].items()},
            comparisons=tuple(Comparison(**{**c, "ci95": tuple(c["ci95"])}) for c in data["comparisons"]),
            word_differences=tuple(WordDifferences(d["a"], d["b"], d["metric"],
                                                   tuple(WordDifference(**w) for w in d["words"]))
                                   for d in data["word_differences"]),
            ngram_scores={name: NgramScores(**n) for name, n in (data.get("ngram_scores") or {}).items()},
            provenance=_provenance(data.get("provenance")),
            warnings=tuple(MetricWarning(**w) for w in data.get("warnings") or ()),
        )

    def to_dict(self) -> dict:
        fields = _plain(dataclasses.asdict(self))
        return {key: fields[key] for key in SUMMARY_KEYS}


def _model(data: dict) -> ModelSummary:
    return ModelSummary(data["n_captions"], data["n_images"], data["n_errors"],
                        {metric: _metric(m) for metric, m in data["metrics"].items()},
                        tuple(FailedRow(**f) for f in data.get("failed") or ()))


def _provenance(data: dict | None) -> Provenance | None:
    if not data:
        return None
    return Provenance(data["capscope"], data["demo"], tuple(data["scorers"]))


def _metric(data: dict) -> MetricSummary:
    return MetricSummary(
        scores={k: Estimate(v["mean"], tuple(v["ci95"])) for k, v in data["scores"].items()},
        words=WordRate(**{**data["words"], "ci95": tuple(data["words"]["ci95"])}),
        captions_with_wrong_word=data["captions_with_wrong_word"],
        error_types={k: ErrorType(**v) for k, v in data["error_types"].items()},
        top_wrong_words=tuple(WrongWord(**{**w, "examples": tuple(w["examples"])}) for w in data["top_wrong_words"]),
        regions=RegionCount(**data["regions"]) if data.get("regions") else None,
    )


def _plain(value):
    """Tuples back to lists, as summary.json holds them."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
