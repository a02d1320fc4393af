"""Every metric capscope knows, each described once by a `MetricSpec`.

The command line's `--metric` choices, the REST API's validation, the web UI's
lists and titles, `capscope evaluate` and `capscope bench` all read this
registry; `Scorer` builds its metrics through the specs' factories. Importing
it is cheap (no torch): the factories import the metric classes when called.
The metrics' defaults (BETA, TOKEN_RULES, ...) live in `constants.py` and
`PreparedPair` in `pairs.py`, which import nothing of ours: the metric classes
read them there, so no metric module imports the registry.

Public API:
    SPECS                        name -> MetricSpec, in registration order
    METRIC_NAMES                 the names, a live read-only sequence (fit for argparse `choices`)
    metric_names(kind=None)      the names (optionally of one kind: "global", "token", "region")
    get_spec(name)               the spec; ValueError with the valid names for an unknown one
    metric_title(name)           the name for people ("InfoMetIC"); the name itself if unknown
    register(spec, replace=False), unregister(name)

Adding a metric is one module and one entry. The module holds a class with a
`compute(pairs, images) -> list[MetricResult]` method (`Metric` below); the
entry says what it is and how it is built from the scorer's shared parts:

    register(MetricSpec(
        name="caption-length", title="Caption length", kind="global",
        score_keys=("length",), primary_key="length",
        needs=Needs(image=False, pixels=False),
        build=lambda parts: CaptionLength(),
    ))

The row format the metrics fill is described in docs/formats.md.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from .constants import BETA, CLIP4DM_EPSILON, CLIP4DM_LAYERS, HICE_THRESHOLD
from .verdict import Verdict

if TYPE_CHECKING:
    from .encoder import ClipBackbone, ImageFeatures
    from .infometic import InfoMetIC
    from .pairs import PreparedPair
    from .result import MetricResult

KINDS = ("global", "token", "region")


class Metric(Protocol):
    """What a spec's factory returns. `backbone` gives the image features the
    scorer hands to `compute` (`image_features(images, regions)` and `dim`);
    a metric whose spec says `needs.image=False` may have none and gets None
    for each image."""

    name: str
    backbone: ClipBackbone | None

    def compute(self, pairs: list[PreparedPair], images: list[ImageFeatures | None]) -> list[MetricResult]: ...


@dataclass(frozen=True)
class Needs:
    """What a metric needs from a row.

    Attributes:
        image: image features (from pixels or an official features file).
        pixels: the pixels themselves: a features file will not do.
        regions: region features.
        masks: reads a region's mask where it has one (else its box).
        references: reads the row's references when it has them (its `ref_keys`).
    """

    image: bool = True        # image features (from pixels or an official features file)
    pixels: bool = True       # the pixels themselves: a features file will not do
    regions: bool = False     # region features
    masks: bool = False       # reads a region's mask where it has one (else its box)
    references: bool = False  # reads the row's references when it has them (its `ref_keys`)


def _ignore_file(role: str, path: str | Path) -> None:
    return None


@dataclass
class MetricParts:
    """What a factory builds a metric from: the scorer's shared models (each
    loaded on its first call, once per scorer) and the user's options.
    `record_file(role, path)` names a checkpoint file the metric loaded itself,
    so that its sha256 lands in every row's `model` block. `beta` and
    `token_rule` read the verdict's, for factories written before it."""

    main_clip: Callable[[], ClipBackbone]
    pacs_clip: Callable[[], ClipBackbone]
    infometic: Callable[[], tuple[InfoMetIC, ClipBackbone]]
    verdict: Verdict  # the scorer's one word and region rule (`Verdict.from_config`)
    alpha_clip_checkpoint: str | None = None
    clip4dm_epsilon: float = CLIP4DM_EPSILON
    clip4dm_layers: int = CLIP4DM_LAYERS
    record_file: Callable[[str, str | Path], None] = _ignore_file
    nlp: object | None = None  # the scorer's spaCy pipeline (HICE-S's phrases); None: the default

    @property
    def beta(self) -> float:
        return self.verdict.beta

    @property
    def token_rule(self) -> str:
        return self.verdict.token_rule


@dataclass(frozen=True)
class KeyNote:
    """What one score key means, for people: the UI's score table and the
    reports read it here, so that each meaning is written once.

    Attributes:
        key: the `scores` key it describes.
        meaning: what the number measures, in a few words.
        range: the values it can take ("0 to 2.5").
        better: which way is better: "higher" or "closer to 0".
    """

    key: str
    meaning: str
    range: str
    better: str = "higher"


@dataclass(frozen=True)
class MetricSpec:
    """One metric, described once.

    Attributes:
        name: the name `--metric`, the REST API and `Scorer` take ("clip-s").
        title: the name for people ("CLIP-S").
        kind: the finest level it judges: "global" (the caption as a whole),
            "token" (words, and regions when it needs them) or "region"
            (regions only).
        score_keys: the `scores` keys of every row.
        primary_key: the one number that ranks captions (FOIL pairing, plots);
            one of `score_keys`.
        build: the factory: `MetricParts` -> a `Metric`.
        ref_keys: the `scores` keys added when the row has references.
        needs: what it needs from a row (`Needs`).
        token_decision, region_decision: how `token_correct` and
            `region_mentioned` are decided, in words for people ("" when it
            gives no such verdict).
        threshold: the default cut of both (None for global metrics).
        follows_token_rule: the decision honours `--beta` and `--token-rule`.
        key_notes: what each score key means, its range and which way is
            better (`KeyNote`), for the UI and reports.

    Raises:
        ValueError: (on construction) an empty or padded name, an unknown kind,
            or a primary key not among the score keys.
    """

    name: str
    title: str
    kind: str
    score_keys: tuple[str, ...]
    primary_key: str
    build: Callable[[MetricParts], Metric]
    ref_keys: tuple[str, ...] = ()
    needs: Needs = Needs()
    token_decision: str = ""
    region_decision: str = ""
    threshold: float | None = None
    follows_token_rule: bool = False
    key_notes: tuple[KeyNote, ...] = ()

    def __post_init__(self):
        if not self.name or self.name != self.name.strip():
            raise ValueError(f"metric name {self.name!r} must be a non-empty word")
        if self.kind not in KINDS:
            raise ValueError(f"metric {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.primary_key not in self.score_keys:
            raise ValueError(f"metric {self.name}: primary key {self.primary_key!r} is not among {self.score_keys}")


SPECS: dict[str, MetricSpec] = {}


class _LiveNames(Sequence):
    """The registered names, read at each use: a constant bound at import time
    (argparse `choices`, an API check) still sees metrics registered later."""

    def __getitem__(self, index):
        return tuple(SPECS)[index]

    def __len__(self) -> int:
        return len(SPECS)

    def __contains__(self, name) -> bool:
        return name in SPECS

    def __repr__(self) -> str:
        return repr(tuple(SPECS))


METRIC_NAMES: Sequence[str] = _LiveNames()


def register(spec: MetricSpec, replace: bool = False) -> MetricSpec:
    """Add a metric; a name already taken is an error unless `replace`.

    Returns:
        `spec`.

    Raises:
        ValueError: the name is taken and `replace` is False.
    """
    if spec.name in SPECS and not replace:
        raise ValueError(f"metric {spec.name!r} is already registered")
    SPECS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a metric; an unknown name is no error."""
    SPECS.pop(name, None)


def metric_names(kind: str | None = None) -> tuple[str, ...]:
    """The registered metric names, in registration order.

    Args:
        kind: only the metrics of this kind ("global", "token" or "region");
            None (default) for all. An unknown kind gives ().

    Returns:
        The names, e.g. ("infometic", "infoclip", "clip-s", "pac-s", "hice",
        "clip4dm") for the built-in metrics.
    """
    return tuple(name for name, spec in SPECS.items() if kind is None or spec.kind == kind)


def get_spec(name: str) -> MetricSpec:
    """The spec of one metric.

    Args:
        name: a registered metric name.

    Returns:
        Its `MetricSpec` (`score_keys`, `ref_keys`, `primary_key`, `kind`, ...).

    Raises:
        ValueError: an unknown name; the message lists the valid ones.
    """
    try:
        return SPECS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown metric {name!r}; choose from {', '.join(SPECS)}") from None


def key_note(name: str, key: str) -> KeyNote | None:
    """What score `key` of metric `name` means (`KeyNote`); None when the
    registry does not say (an unknown metric or key). Never raises."""
    spec = SPECS.get(name)
    return next((note for note in spec.key_notes if note.key == key), None) if spec else None


def metric_title(name: str) -> str:
    """The name for people ("InfoMetIC" for "infometic"); the name itself
    when it is not registered (never raises)."""
    spec = SPECS.get(name)
    return spec.title if spec else name


# ---------------------------------------------------------------- the built-in metrics
# The factories import their classes when called, so that this module stays cheap.

def _build_clip_s(parts: MetricParts) -> Metric:
    from .clipscore import CLIP_S_WEIGHT
    from .families import ClipScoreMetric

    return ClipScoreMetric("clip-s", parts.main_clip(), CLIP_S_WEIGHT, "clip_s")


def _build_pac_s(parts: MetricParts) -> Metric:
    from .clipscore import PAC_S_WEIGHT
    from .families import ClipScoreMetric

    return ClipScoreMetric("pac-s", parts.pacs_clip(), PAC_S_WEIGHT, "pac_s")


def _build_infoclip(parts: MetricParts) -> Metric:
    from .families import InfoClipMetric

    return InfoClipMetric("infoclip", parts.main_clip(), parts.verdict)


def _build_infometic(parts: MetricParts) -> Metric:
    from .families import InfoMetICMetric

    model, backbone = parts.infometic()
    return InfoMetICMetric(model, backbone, parts.verdict)


def _build_hice(parts: MetricParts) -> Metric:
    from .hice import HiceMetric

    metric = HiceMetric(parts.main_clip(), alpha_clip_checkpoint=parts.alpha_clip_checkpoint, nlp=parts.nlp)
    if metric.alpha_path is not None:
        parts.record_file("alpha-clip", metric.alpha_path)
    return metric


def _build_clip4dm(parts: MetricParts) -> Metric:
    from .clip4dm import Clip4DMMetric

    return Clip4DMMetric(parts.main_clip(), epsilon=parts.clip4dm_epsilon, layers=parts.clip4dm_layers)


_INFO_TOKENS = ("a semantic word is correct when the sum of its BPE pieces' attention shares exceeds β "
                "(--token-rule relative: β·5/n for n semantic words seen, at most β)")
_INFO_REGIONS = "a region is mentioned when its attention share exceeds β"
_INFO_NOTES = (
    KeyNote("precision", "how much of the caption the image supports (text side): τ·cosine",
            "−τ to τ (τ: the model's scale)"),
    KeyNote("recall", "how much of the image the caption covers (vision side): τ·cosine",
            "−τ to τ (τ: the model's scale)"),
    KeyNote("overall", "precision + recall", "−2τ to 2τ"),
)

register(MetricSpec(
    name="infometic", title="InfoMetIC", kind="token",
    score_keys=("precision", "recall", "overall", "overall_plus"), primary_key="overall",
    needs=Needs(pixels=False, regions=True), build=_build_infometic,
    token_decision=_INFO_TOKENS, region_decision=_INFO_REGIONS, threshold=BETA, follows_token_rule=True,
    key_notes=_INFO_NOTES + (KeyNote("overall_plus", "overall + 100·cos(image, caption): adds the global match",
                                     "overall − 100 to overall + 100"),),
))
register(MetricSpec(
    name="infoclip", title="InfoCLIP", kind="token",
    score_keys=("precision", "recall", "overall"), primary_key="overall",
    needs=Needs(pixels=False, regions=True), build=_build_infoclip,
    token_decision=_INFO_TOKENS, region_decision=_INFO_REGIONS, threshold=BETA, follows_token_rule=True,
    key_notes=_INFO_NOTES,
))
register(MetricSpec(
    name="clip-s", title="CLIP-S", kind="global",
    score_keys=("clip_s",), ref_keys=("ref_clip_s",), primary_key="clip_s",
    needs=Needs(references=True), build=_build_clip_s,
    key_notes=(KeyNote("clip_s", "how well the caption matches the image as a whole: 2.5·max(cos, 0)",
                       "0 to 2.5 (about 0.5–1 for real captions)"),
               KeyNote("ref_clip_s", "harmonic mean of CLIP-S and the best match with a reference caption",
                       "0 to about 1.4")),
))
register(MetricSpec(
    name="pac-s", title="PAC-S", kind="global",
    score_keys=("pac_s",), ref_keys=("ref_pac_s",), primary_key="pac_s",
    needs=Needs(references=True), build=_build_pac_s,
    key_notes=(KeyNote("pac_s", "CLIP-S with PAC-S's fine-tuned CLIP: 2·max(cos, 0)", "0 to 2"),
               KeyNote("ref_pac_s", "harmonic mean of PAC-S and the best match with a reference caption",
                       "0 to about 1.3")),
))
register(MetricSpec(
    name="hice", title="HICE-S", kind="token",
    score_keys=("hice", "g_itc", "l_itc", "precision", "recall"), ref_keys=("ref_hice", "g_ttc", "l_ttc"),
    primary_key="hice", needs=Needs(regions=True, masks=True, references=True), build=_build_hice,
    token_decision="a word is correct when a caption phrase holding it has its best region cosine above the "
                   "threshold (0.2, or a sigmoid-loss CLIP's own decision boundary)",
    region_decision="a region is mentioned when its best phrase cosine is above the same threshold",
    threshold=HICE_THRESHOLD,
    key_notes=(KeyNote("hice", "harmonic mean of the global (g_itc) and local (l_itc) image match", "0 to 1"),
               KeyNote("g_itc", "cosine of the whole image and the whole caption", "−1 to 1"),
               KeyNote("l_itc", "harmonic mean of the phrase-level precision and recall", "0 to 1"),
               KeyNote("precision", "each phrase's best region cosine, averaged: is what it says there?", "−1 to 1"),
               KeyNote("recall", "each region's best phrase cosine, averaged: is what is there said?", "−1 to 1"),
               KeyNote("ref_hice", "harmonic mean of g_itc, l_itc, g_ttc and l_ttc", "0 to 1"),
               KeyNote("g_ttc", "best cosine of the caption with a reference caption", "−1 to 1"),
               KeyNote("l_ttc", "phrase-level match with the references", "0 to 1")),
))
register(MetricSpec(
    name="clip4dm", title="CLIP4DM", kind="token",
    score_keys=("clip_s", "f_clip_s", "negative_attribution"), primary_key="f_clip_s",
    build=_build_clip4dm,
    token_decision="a semantic word is wrong when its gradient x attention attribution (the mean of its BPE "
                   "pieces', last 3 text layers) is below epsilon (-5e-5)",
    threshold=CLIP4DM_EPSILON,
    key_notes=(KeyNote("clip_s", "how well the caption matches the image as a whole: 2.5·max(cos, 0)",
                       "0 to 2.5"),
               KeyNote("f_clip_s", "F-CLIPScore: the wrong words' attribution scaled by (1 − clip_s/2.5)",
                       "0 or below", "closer to 0"),
               KeyNote("negative_attribution", "sum of the attributions of the words judged wrong",
                       "0 or below", "closer to 0")),
))
