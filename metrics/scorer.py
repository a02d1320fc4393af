"""Load once, score many: `Scorer` turns (image, caption) pairs into the output
rows of docs/formats.md §2.

    scorer = Scorer(metrics=["infometic", "clip-s"])
    row = scorer.score(Image.open("dog.jpg"), "a dog on a sofa")
    rows = scorer.score_batch([{"id": "1", "image": img, "caption": "..."}, ...])

Image-side features are cached per image, so a new caption on a known image
costs only its text. Regions come from the pair (`regions`), from an official
feature file (`features`), or from the configured proposer.

Every constructor option, the row layout and the errors are described in
docs/api.md (the reference page of the Python API); the JSON fields of a row in
docs/formats.md §2. An input row is read and checked in input_rows.py, an
output row and its provenance made in output_rows.py.
"""
from __future__ import annotations

import logging
from pathlib import Path

from PIL import Image

from capscope.common.lru import LRUCache

from . import loading, windows
from .config import ScorerConfig
from .feature_files import features_from_file
from .image_cache import ImageFeatures, ImageHash, image_keys
from .input_rows import PreparedInput, Upcoming, prepare_input, row_image, row_regions
from .loading import ModelUnavailable
from .model_sources import ModelSources
from .output_rows import provenance_of, score_row
from .runtime import resolve_runtime
from .regions import PROPOSERS, Region, select_regions
from .registry import MetricParts, Needs, get_spec
from .result import MetricResult, ScoreRow
from .row_errors import RowError
from .text import Token, checked_tokens, load_spacy, tokenize
from .verdict import Verdict

log = logging.getLogger(__name__)

REGIONS_CACHE_SIZE = 512  # images whose proposed regions are kept


class Scorer:
    """Loads the models of some metrics once and scores (image, caption) pairs.

    The models are loaded in the constructor: a missing one raises
    `ModelUnavailable` there (or, with `skip_unavailable`, leaves its metric
    out), never half-way through a batch. The metrics that share a model share
    one copy (clip-s, infoclip, hice and clip4dm read the same CLIP). Scoring
    never raises for a bad input row: `score_batch` and `results` put the reason
    in that row's `error`, `score` raises `RowError`. The one exception is a
    region proposer (`regions` = sam, yolo, fastsam, mobilesam), loaded at the
    first image that needs it: its `ModelUnavailable` comes from the scoring call.

    Example (docs/api.md has a complete one, run by the tests):

        scorer = Scorer(["infometic", "clip-s"], device="cpu", regions="given")
        row = scorer.score(image, "a red circle", regions=[[62, 62, 162, 162]])
        row["metrics"]["infometic"]["scores"]["overall"]

    Attributes:
        config: the `ScorerConfig` it was built from.
        metrics: name -> the loaded metric, in the order asked for (without those
            left out by `skip_unavailable`).
        specs: name -> its `registry.MetricSpec`, for every name asked for.
        unavailable: name -> the one-line reason its model could not be had
            (empty unless `skip_unavailable`).
        device: the `torch.device` the models run on.
        demo: True once capscope's bundled demo model stands in for the
            pretrained weights; every row says so in `model.demo`.
        precision, region_source, max_regions, beta, token_rule, long_captions:
            the options, as the config gives them.
        verdict: the one rule words and regions are decided by
            (`verdict.Verdict`, from the config's token rule and β); every
            row writes it, per metric that follows it, in `model.verdict`.
        clip_name: the name of the first CLIP loaded ("none" when none was).
        text_model: the spaCy pipeline, or "spacy.blank('en') (fallback)".
        checkpoints: role -> {"file", "sha256"} of every checkpoint file loaded.
    """

    def __init__(self, metrics=None, *, config: ScorerConfig | None = None, **options):
        """Loads the models of `metrics` as `config` and `options` say.

        Pretrained files are found in this order: the option, its environment
        variable, capscope's cache folder (CAPSCOPE_CACHE, default
        ~/.cache/capscope). Nothing is downloaded here but an open_clip tag
        that is not yet cached, and only when the Hugging Face hub answers
        (never with HF_HUB_OFFLINE=1); `capscope models download` fetches the
        rest. Demo fallback: when the InfoMetIC checkpoint or the default CLIP
        (ViT-B-32/openai) cannot be had and was not named explicitly, capscope's
        bundled demo model stands in, with a warning, and every row says
        `"demo": true` in its `model` block (`demo` in `ScorerConfig`). Set
        CAPSCOPE_NO_DEMO=1 to get `ModelUnavailable` instead.

        Args:
            metrics: the metric names to load (`registry.metric_names()`:
                infometic, infoclip, clip-s, pac-s, hice, clip4dm), or one name;
                default: the config's, ("infometic",) unless it says otherwise.
            config: a `ScorerConfig`; default: every option at its default.
            **options: any field of `ScorerConfig` (device, clip_model, regions,
                token_rule, ...), each replacing the config's; the fields, their
                defaults and meanings are in `ScorerConfig` and in docs/api.md's
                table. A name that is no option raises TypeError.

        Raises:
            TypeError: a keyword that is no `ScorerConfig` field.
            ValueError: an unknown metric name, region source, precision or (when
                infometic or infoclip is asked for) token rule.
            ModelUnavailable: a model cannot be had (missing or unreadable file,
                an open_clip tag not cached while offline, the demo fallback
                unavailable or turned off), or device "cuda" with no GPU
                visible; unless `skip_unavailable`, as for a metric's
                `ImportError`. A device error is raised either way.
        """
        config = (config or ScorerConfig()).replace(**options)
        if metrics is not None:
            config = config.replace(metrics=metrics)
        self.config = config
        self.specs = {name: get_spec(name) for name in config.metrics}
        self.precision = config.precision  # the config checked the choices
        self.device = loading.resolve_device(config.device)
        if config.precision == "fp16" and self.device.type == "cpu":
            log.warning("--precision fp16 on a CPU: most CPUs have no fp16 arithmetic, and it ran at a fifth of "
                        "fp32's speed here; bf16 is the CPU's fast precision")
        self.region_source, self.max_regions = config.regions, config.max_regions
        self.nlp = load_spacy(config.spacy_model)
        self.text_model = config.spacy_model if self.nlp.pipe_names else "spacy.blank('en') (fallback)"
        self.runtime = resolve_runtime(config.runtime, self.device, self.precision)
        self.sources = ModelSources(self.device, self.precision, config.demo, self.runtime)
        self._proposer = None
        self._regions_cache = LRUCache(REGIONS_CACHE_SIZE)
        self.verdict = Verdict.from_config(config)  # the one word and region rule, carried by every metric
        self.beta, self.token_rule = self.verdict.beta, self.verdict.token_rule
        self.long_captions = config.long_captions
        self._provenance: dict | None = None
        self.metrics, self.unavailable = self._load_metrics(config)
        backbones = [self.sources.loaded.get("clip")] + [getattr(m, "backbone", None) for m in self.metrics.values()]
        self.clip_name = next((b.name for b in backbones if b is not None), "none")
        # no metric here reads regions (CLIP-S, PAC-S, CLIP4DM): proposing them would be work no one reads
        self.proposes_regions = config.regions != "given" and any(self.specs[m].needs.regions for m in self.metrics)

    def _load_metrics(self, config: ScorerConfig) -> tuple[dict, dict[str, str]]:
        """Each metric asked for, built from parts loaded once and shared."""
        sources = self.sources
        parts = MetricParts(
            main_clip=sources.once("clip", lambda: sources.main_clip(config.clip_model, config.clip_pretrained,
                                                                      config.clip_crop)),
            pacs_clip=sources.once("pac-s", lambda: sources.pacs_clip(config.pacs_checkpoint, config.pacs_model)),
            infometic=sources.once("infometic", lambda: sources.infometic(config.infometic_checkpoint)),
            verdict=self.verdict, alpha_clip_checkpoint=config.alpha_clip_checkpoint,
            clip4dm_epsilon=config.clip4dm_epsilon, clip4dm_layers=config.clip4dm_layers,
            record_file=sources.record_file, nlp=self.nlp,
        )
        metrics, unavailable = {}, {}
        for name, spec in self.specs.items():
            try:
                metrics[name] = spec.build(parts)
            except (ModelUnavailable, ImportError) as err:
                if not config.skip_unavailable:
                    raise
                unavailable[name] = str(err).splitlines()[0] if str(err) else type(err).__name__
                log.warning("metric %s left out: %s", name, unavailable[name])
        return metrics, unavailable

    @property
    def demo(self) -> bool:
        return self.sources.demo

    @property
    def checkpoints(self) -> dict[str, dict]:
        return self.sources.checkpoints

    def word_threshold_scale(self, metric: str) -> float:
        """What the metric's word threshold is multiplied by: its checkpoint's
        fitted `word_threshold_scale`, 1 for every other metric and checkpoint."""
        return getattr(self.metrics.get(metric), "word_scale", 1.0)

    # ------------------------------------------------------------ scoring

    def score(self, image, caption: str, references=None, regions=None, tokens=None, features=None,
              only: list[str] | None = None) -> dict:
        """Scores one pair: `score_batch` of one row.

        Args:
            image: a PIL image (any mode; converted to RGB) or the path of an
                image file.
            caption: the caption, 1 to 5000 characters (one longer than a
                model reads is read in windows: `long_captions`).
            references: reference captions (a list of non-empty strings) for
                the `ref_*` scores of clip-s, pac-s and hice; None for none.
            regions: this image's regions, used instead of proposing any: boxes
                [x0, y0, x1, y1] in pixels, or {"box", "confidence"?, "mask"?}
                dicts (mask: COCO RLE of the image's size); None: the
                constructor's `regions` source.
            tokens: the caption's tokens as {"text", "start", "end",
                "semantic"?} dicts, used instead of tokenising;
                caption[start:end] must equal text.
            features: the path of an official InfoMetIC image-features file
                (.npz, docs/formats.md §5); the image side comes from it.
            only: score with these of the loaded metrics only (default: all).

        Returns:
            The output row as a JSON-ready dict (docs/formats.md §2.2). It may
            carry an `error` beside results, e.g. when some metric needs the
            pixels of a features-only row.

        Raises:
            RowError: the pair cannot be scored at all (empty or over-long
                caption, unreadable image, bad regions, tokens or references).
            ModelUnavailable: a region proposer's weights, loaded at its first
                use, cannot be had.
        """
        row = self.score_batch([{
            "id": "0", "image": image, "caption": caption, "references": references,
            "regions": regions, "tokens": tokens, "features": features,
        }], only=only)[0]
        if row["error"] and not row["metrics"]:
            raise RowError(row["error"])
        return row

    def score_batch(self, rows: list[dict], base_dir: Path | None = None, only: list[str] | None = None,
                    ahead: list[dict] | None = None) -> list[dict]:
        """Scores many pairs, one output row per input row, in order.

        Args:
            rows: input rows as dicts with the keys of docs/formats.md §2.1:
                "id", "image" (a PIL image or a path), "caption", and optionally
                "references", "regions", "tokens", "features" (as in `score`).
            base_dir: the folder relative image and features paths are read
                from (default: the working directory).
            only: score with these of the loaded metrics only (default: all).
            ahead: the rows a pipeline scores next, if it knows them: where an
                image pass would be filled up with copies, their images take
                the spare rows and are cached for their turn. No number
                changes; a row of them that cannot be read is left for its turn.

        Returns:
            The output rows as JSON-ready dicts (docs/formats.md §2.2). A row
            that cannot be scored does not raise: it has an "error" line, empty
            "metrics" and a null "model" (docs/formats.md §2.5).

        Raises:
            ModelUnavailable: a region proposer's weights, loaded at its first
                use, cannot be had.
        """
        return [row.to_dict() for row in self.results(rows, base_dir, only, ahead)]

    def results(self, rows: list[dict], base_dir: Path | None = None, only: list[str] | None = None,
                ahead: list[dict] | None = None) -> list[ScoreRow]:
        """`score_batch`, typed: the same rows as `ScoreRow` objects.

        Args:
            rows: input rows, as for `score_batch`.
            base_dir: the folder relative paths are read from.
            only: score with these of the loaded metrics only (default: all).
            ahead: the rows scored next, as for `score_batch`.

        Returns:
            One `result.ScoreRow` per input row, in order; `to_dict()` gives
            the JSON row. A row that cannot be scored has `error` set, no
            `metrics` and `model` None.

        Raises:
            ModelUnavailable: a region proposer's weights cannot be had.
        """
        prepared = [prepare_input(i, row, base_dir, self._tokens, self._regions) for i, row in enumerate(rows)]
        ready = [p for p in prepared if not p.errors]
        upcoming = Upcoming(ahead or [], lambda row: self._upcoming_image(row, base_dir))
        results: dict[int, dict[str, MetricResult]] = {p.index: {} for p in prepared}
        for name, metric in self.metrics.items():
            if only is not None and name not in only:
                continue
            needs = self.specs[name].needs
            usable = [p for p in ready if not needs.pixels or p.image is not None]
            for p in ready:
                if needs.pixels and p.image is None:  # not in `usable` (a test by value was quadratic)
                    p.errors.append(f"{name} needs pixels; this row gives only a features file")
            usable = [p for p in usable if not (needs.image and self._dim_mismatch(p, metric))]
            if not usable:
                continue
            images = self._image_features(metric, needs, usable, upcoming) if needs.image else [None] * len(usable)
            global_only = self.specs[name].kind == "global"
            outs = windows.compute(metric, [p.pair for p in usable], images, self.long_captions, global_only)
            for p, out in zip(usable, outs):
                results[p.index][name] = out
        return [score_row(self, rows[p.index], p, results[p.index]) for p in prepared]

    def _dim_mismatch(self, p: PreparedInput, metric) -> bool:
        if p.features is not None and p.features["feat"].shape[1] != metric.backbone.dim:
            p.errors.append(
                f"features file has {p.features['feat'].shape[1]}-d features; {metric.name}'s CLIP gives {metric.backbone.dim}-d"
            )
            return True
        return False

    def _image_features(self, metric, needs: Needs, prepared: list[PreparedInput], upcoming: Upcoming) -> list[ImageFeatures]:
        out: list[ImageFeatures | None] = [None] * len(prepared)
        pixels = [i for i, p in enumerate(prepared) if p.features is None or needs.pixels]
        if pixels:
            images = [prepared[i].image for i in pixels]
            regions = [prepared[i].regions if needs.regions else [] for i in pixels]
            ahead = ((rs if needs.regions else [], image_hash) for rs, image_hash in upcoming)
            hashes = image_keys([prepared[i].image_hash for i in pixels])
            for i, features in zip(pixels, metric.backbone.image_features(images, regions, ahead, hashes)):
                out[i] = features
        for i, p in enumerate(prepared):
            if out[i] is None:
                out[i] = features_from_file(p.features)
        return out

    # ------------------------------------------------------------ input rows

    def _upcoming_image(self, row: dict, base_dir: Path | None) -> tuple[list[Region], ImageHash] | None:
        """A row of `ahead`'s regions and image (as its `ImageHash`, which every
        metric's fill shares), or None where it has none to encode (a features
        file, no image) or they cannot be had: its own turn says why."""
        if not isinstance(row, dict) or row.get("image") is None or row.get("features") is not None:
            return None
        try:
            image_hash = ImageHash(row_image(row["image"], base_dir)[0])
            return self._regions(image_hash.image, row.get("regions"), image_hash), image_hash
        except RowError:
            return None

    def _tokens(self, caption: str, given) -> list[Token]:
        if given is None:
            return tokenize(caption, self.nlp)
        try:
            return checked_tokens(given, caption)
        except ValueError as err:
            raise RowError(str(err)) from None

    def _regions(self, image: Image.Image, given, image_hash: ImageHash) -> list[Region]:
        if given is not None:
            return row_regions(given, image.size)
        if not self.proposes_regions:
            return []
        return self._regions_cache.get_or_compute(
            image_hash(), lambda: select_regions(self.proposer().propose(image), self.max_regions))

    def proposer(self):
        """The configured region proposer, loaded once, on the scorer's device."""
        if self._proposer is None:
            self._proposer = PROPOSERS[self.region_source](device=str(self.device))
        return self._proposer

    def provenance(self) -> dict:
        """What a number depends on beyond the model names (versions, dtype,
        device, prompt, β, token rule, checkpoint sha256s); computed once."""
        if self._provenance is None:
            self._provenance = provenance_of(self)
        return self._provenance
