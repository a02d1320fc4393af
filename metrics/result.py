"""The output row of `capscope score` as types, built here and nowhere else.

`ScoreRow.to_dict()` gives the JSON row that docs/formats.md describes ("score
rows"): the same keys in the same order as always, with the `model` block
extended by what makes a number reproducible (library versions, dtype, device,
prompt, β and token rule, and the sha256 of every checkpoint file used).

    ScoreRow(id="1", image="dog.jpg", caption="a dog", tokens=[...], regions=[...],
             metrics={"clip-s": MetricResult.global_only({"clip_s": 0.71}, 2)},
             model=ModelInfo(...)).to_dict()
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from capscope.common.checksums import file_sha256


@dataclass
class PieceScore:
    """One BPE piece the InfoMetIC family saw; `token` indexes the row's tokens."""

    text: str
    token: int | None
    score: float


@dataclass
class PhraseScore:
    """One HICE-S caption phrase; `tokens` index the row's tokens."""

    text: str
    tokens: list[int]
    score: float
    correct: bool


@dataclass
class WordScore:
    """One word of a CLIP4DM caption as its released code splits words; the
    span indexes the caption."""

    text: str
    start: int
    end: int
    score: float


@dataclass
class MetricResult:
    """One metric's verdict on one pair: global `scores`, one value per token
    and per region, and what only some families report (`pieces`, `phrases`,
    `features`, `words`: left out of the JSON when None). The fields are the
    metric object of docs/formats.md §2.2.

    Attributes:
        scores: the global scores, keyed by the spec's `score_keys` (plus its
            `ref_keys` when the row had references).
        token_scores: one per row token: how well the image supports the word,
            None where the metric has no score for it.
        token_correct: one per row token: the verdict (docs/formats.md §2.4),
            None for non-semantic tokens and tokens without a score.
        region_scores: one per row region: how much the caption covers it
            (empty for global-only metrics and clip4dm).
        region_mentioned: one per row region: the verdict.
        null_score: the InfoMetIC family's share of the vision null slot; None
            for the others.
        pieces: the InfoMetIC family's BPE pieces with their shares.
        phrases: HICE-S's caption phrases.
        features: HICE-S's account of how it worked (region features, phrase
            source, threshold).
        words: CLIP4DM's words with their attributions.
        windows: the parts of the caption the metric read, as [start, end]
            character offsets (metrics.windows); None for a metric that
            cannot say.
        truncated: True when a semantic word was left unjudged because the
            caption was too long for the model.
    """

    scores: dict[str, float]
    token_scores: list[float | None]
    token_correct: list[bool | None]
    region_scores: list[float] = field(default_factory=list)
    region_mentioned: list[bool] = field(default_factory=list)
    null_score: float | None = None
    pieces: list[PieceScore] | None = None
    phrases: list[PhraseScore] | None = None
    features: dict | None = None
    words: list[WordScore] | None = None
    windows: list[list[int]] | None = None
    truncated: bool | None = None

    @classmethod
    def global_only(cls, scores: dict[str, float], n_tokens: int) -> MetricResult:
        """A metric that judges the caption as a whole: no token or region verdicts."""
        return cls(scores, [None] * n_tokens, [None] * n_tokens)

    def to_dict(self) -> dict:
        """The metric object of a JSON row; the optional fields only when set."""
        out = {
            "scores": self.scores,
            "token_scores": self.token_scores,
            "token_correct": self.token_correct,
            "region_scores": self.region_scores,
            "region_mentioned": self.region_mentioned,
            "null_score": self.null_score,
        }
        if self.windows is not None:
            out["windows"] = self.windows
            out["truncated"] = bool(self.truncated)
        if self.pieces is not None:
            out["pieces"] = [plain(p) for p in self.pieces]
        if self.phrases is not None:
            out["phrases"] = [plain(p) for p in self.phrases]
        if self.features is not None:
            out["features"] = self.features
        if self.words is not None:
            out["words"] = [plain(w) for w in self.words]
        return out


@dataclass
class ModelInfo:
    """The row's `model` block: the four fields rows always had (`clip`, the
    region source `regions`, `text`, `demo`), then what a number depends on."""

    clip: str
    regions: str
    text: str
    demo: bool
    capscope: str = ""
    torch: str = ""
    open_clip: str = ""
    pillow: str = ""
    dtype: str = ""
    precision: str = ""  # fp32, bf16 or fp16: the --precision the towers ran at
    runtime: str = ""  # what ran the CLIP text towers: eager (PyTorch) or onnxruntime X.Y.Z
    device: str = ""
    prompt: str = ""
    beta: float | None = None
    token_rule: str = ""
    region_rule: str = ""  # how regions were judged: the token rule's name (words.region_threshold)
    long_captions: str = ""  # how captions longer than a model reads were read (windows.LONG_CAPTIONS)
    checkpoints: dict[str, dict] = field(default_factory=dict)  # role -> {"file", "sha256"}
    metric_options: dict[str, dict] = field(default_factory=dict)  # metric -> its own settings (clip4dm's epsilon, layers)
    verdict: dict[str, dict] = field(default_factory=dict)  # metric -> the rule it decided by (verdict.Verdict.record)

    def to_dict(self) -> dict:
        out = {name: getattr(self, name) for name in field_names(type(self))}
        out["checkpoints"] = {role: dict(entry) for role, entry in self.checkpoints.items()}  # rows share none
        out["metric_options"] = {name: dict(entry) for name, entry in self.metric_options.items()}
        out["verdict"] = {name: dict(entry) for name, entry in self.verdict.items()}
        return out


@dataclass
class ScoreRow:
    """One output row, as `Scorer.results` gives it; `to_dict()` is the JSON
    row of docs/formats.md §2.2, the fields in the same order.

    Attributes:
        id: the input row's id, as given.
        image: the input's image path as given (None for an in-memory image or
            a features-only row).
        caption: the caption, as given.
        tokens: the caption's words as `text.Token` (text, start, end,
            semantic); empty on a row that failed.
        regions: the regions every metric saw, as `regions.Region`, in the
            order of every per-region list; empty on a row that failed.
        metrics: metric name -> its `MetricResult`, for each metric that
            scored the row.
        model: what produced the numbers (`ModelInfo`: CLIP, region source,
            spaCy pipeline, demo flag, versions, precision, checkpoints); None
            on a row that failed before any model saw it.
        error: None, or one line (for people) saying what went wrong; it may
            stand beside results (docs/formats.md §2.5).
    """

    id: Any
    image: str | None
    caption: Any
    tokens: list = field(default_factory=list)
    regions: list = field(default_factory=list)
    metrics: dict[str, MetricResult] = field(default_factory=dict)
    model: ModelInfo | None = None
    error: str | None = None

    @classmethod
    def failed(cls, row: dict | None, error: str) -> ScoreRow:
        """The row for an input line that cannot be scored at all (bad JSON, no id)."""
        row = row or {}
        return cls(row.get("id"), row.get("image"), row.get("caption"), error=error)

    def to_dict(self) -> dict:
        """The JSON-ready row (docs/formats.md §2.2)."""
        return {
            "id": self.id,
            "image": self.image,
            "caption": self.caption,
            "tokens": [plain(t) for t in self.tokens],  # Token.to_dict's dict, without asdict's deep copy
            "regions": [r.to_dict() for r in self.regions],
            "metrics": {name: result.to_dict() for name, result in self.metrics.items()},
            "model": None if self.model is None else self.model.to_dict(),
            "error": self.error,
        }


# ---------------------------------------------------------------- plain dicts

SCALARS = frozenset({str, int, float, bool, type(None)})


@functools.cache
def field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def plain(item) -> dict:
    """`dataclasses.asdict(item)` for a dataclass of scalars and lists of
    scalars (a row's tokens, pieces, phrases, words), built directly: asdict
    walks and deep-copies every value, which was a tenth of a CLIP-S row's host
    time (issue 59). Anything else goes through asdict itself."""
    out = {}
    for name in field_names(type(item)):
        value = getattr(item, name)
        if type(value) not in SCALARS:
            if type(value) is not list or any(type(v) not in SCALARS for v in value):
                return asdict(item)
            value = list(value)  # asdict's copy: the row does not share the result's list
        out[name] = value
    return out


# ---------------------------------------------------------------- reproducibility

@functools.cache
def library_versions() -> dict[str, str]:
    """The versions a score depends on (Pillow's resizing and fp16 vs fp32 move it)."""
    names = {"capscope": "capscope", "torch": "torch", "open_clip": "open_clip_torch", "pillow": "Pillow"}
    return {key: _version(dist) for key, dist in names.items()}


def _version(distribution: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def checkpoint_digest(path: str | Path) -> dict:
    """{"file": name, "sha256": hex} of a checkpoint file, taken when it is loaded
    (hashed once per file: `checksums.file_sha256` keeps the digests)."""
    return {"file": Path(path).name, "sha256": file_sha256(path)}


def reproducibility(*, dtype: str, precision: str, device: str, prompt: str, beta: float, token_rule: str,
                    checkpoints: dict[str, dict], metric_options: dict[str, dict] | None = None,
                    verdict: dict[str, dict], long_captions: str = "", runtime: str = "eager") -> dict:
    """The `ModelInfo` fields beyond the first four, as keyword arguments."""
    return {**library_versions(), "dtype": dtype, "precision": precision, "runtime": runtime, "device": device, "prompt": prompt, "beta": beta,
            "token_rule": token_rule, "region_rule": token_rule, "long_captions": long_captions, "checkpoints": dict(checkpoints), "metric_options": dict(metric_options or {}),
            "verdict": dict(verdict)}
