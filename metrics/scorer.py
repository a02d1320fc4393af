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
docs/formats.md §2.
"""
from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from . import downloads, loading
from .clipscore import PROMPT
from . import windows
from .constants import BETA, CLIP4DM_EPSILON, CLIP4DM_LAYERS, DEFAULT_TOKEN_RULE, check_precision
from .encoder import ClipBackbone, CropStyle, ImageFeatures, image_key
from capscope.common.errors import CapscopeError
from .infometic import InfoMetIC, HeadConfig, load_strict, released_backbone_name, released_head_config
from .loading import ModelUnavailable
from capscope.common.lru import LRUCache
from .pairs import PreparedPair
from .regions import PROPOSERS, Region, given_regions, select_regions
from .registry import MetricParts, Needs, get_spec
from .result import MetricResult, ModelInfo, ScoreRow, checkpoint_digest, reproducibility
from .images import ImageError, read_image
from capscope.common.jsonl import shown
from capscope.common.paths import safe_name
from .text import Token, check_caption, check_references, load_spacy, tokenize
from .windows import DEFAULT_LONG_CAPTIONS, check_long_captions

log = logging.getLogger(__name__)

DEFAULT_CLIP = ("ViT-B-32", "openai")
REGIONS_CACHE_SIZE = 512  # images whose proposed regions are kept
NO_REGIONS = "none (no metric read regions)"  # the row's model.regions when none were proposed


class RowError(CapscopeError, ValueError):
    """Why one input row cannot be scored."""


@dataclass
class _Prepared:
    index: int
    pair: PreparedPair
    image: Image.Image | None
    regions: list[Region] | None
    features: dict | None = None
    image_name: str | None = None
    errors: list[str] = field(default_factory=list)


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
        metrics: name -> the loaded metric, in the order asked for (without those
            left out by `skip_unavailable`).
        specs: name -> its `registry.MetricSpec`, for every name asked for.
        unavailable: name -> the one-line reason its model could not be had
            (empty unless `skip_unavailable`).
        device: the `torch.device` the models run on.
        demo: True once capscope's bundled demo model stands in for the
            pretrained weights; every row says so in `model.demo`.
        precision, region_source, max_regions, beta, token_rule: the options.
        clip_name: the name of the first CLIP loaded ("none" when none was).
        text_model: the spaCy pipeline, or "spacy.blank('en') (fallback)".
        checkpoints: role -> {"file", "sha256"} of every checkpoint file loaded.
    """

    def __init__(
        self,
        metrics=("infometic",),
        *,
        device: str = "auto",
        clip_model: str | None = None,
        clip_pretrained: str | None = None,
        clip_crop: CropStyle | None = None,
        regions: str = "classic",
        max_regions: int = 20,
        infometic_checkpoint: str | None = None,
        pacs_checkpoint: str | None = None,
        pacs_model: str = "ViT-B-32-quickgelu",
        alpha_clip_checkpoint: str | None = None,
        clip4dm_epsilon: float = CLIP4DM_EPSILON,
        clip4dm_layers: int = CLIP4DM_LAYERS,
        precision: str = "fp32",
        beta: float = BETA,
        token_rule: str = DEFAULT_TOKEN_RULE,
        long_captions: str = DEFAULT_LONG_CAPTIONS,
        spacy_model: str = "en_core_web_sm",
        skip_unavailable: bool = False,
        demo: bool | None = None,
    ):
        """Loads the models of `metrics` on `device`.

        Pretrained files are found in this order: the option, its environment
        variable, capscope's cache folder (CAPSCOPE_CACHE, default
        ~/.cache/capscope). Nothing is downloaded here but an open_clip tag
        that is not yet cached, and only when the Hugging Face hub answers
        (never with HF_HUB_OFFLINE=1); `capscope models download` fetches the
        rest. Demo fallback: when the InfoMetIC checkpoint or the default CLIP
        (ViT-B-32/openai) cannot be had and was not named explicitly
        (`infometic_checkpoint`; `clip_model` / `clip_pretrained`), capscope's
        bundled demo model (a tiny CLIP and InfoMetIC head that know coloured
        shapes, not photos; CAPSCOPE_DEMO_MODEL points to another file) stands
        in, with a warning, and every row says `"demo": true` in its `model`
        block. Set CAPSCOPE_NO_DEMO=1 to get `ModelUnavailable` instead.

        Args:
            metrics: the metric names to load: names from the
                registry (`registry.metric_names()`: infometic, infoclip, clip-s,
                pac-s, hice, clip4dm), or one name. Default ("infometic",).
            device: "auto" (default) picks CUDA when a GPU is visible, else the
                CPU; "cpu", "cuda" or any `torch.device` string ("cuda:1").
            clip_model: the open_clip architecture of the CLIP that clip-s,
                infoclip, hice and clip4dm read. Default None: ViT-B-32.
                InfoMetIC and PAC-S bring their own CLIP and ignore it.
            clip_pretrained: that CLIP's weights: an open_clip pretrained tag
                (loaded from the Hugging Face cache, downloaded when online) or a
                local checkpoint file (open_clip, OpenAI or PAC-S layout).
                Default None: "openai". Naming either `clip_model` or
                `clip_pretrained` turns the demo fallback off for this CLIP.
            clip_crop: an `encoder.CropStyle` saying how a region becomes a CLIP
                input for that CLIP (margin, fixed canvas), for a CLIP trained on
                styled crops. Default None: the plain box crop. The demo model
                carries its own.
            regions: where a row without its own `regions` (and without a
                features file) gets regions from: "classic" (default; graph
                segmentation, no weights), "sam", "yolo", "fastsam", "mobilesam"
                (learned proposers, their weights found as in
                `segmenters`, loaded at the first image that needs them), or
                "given" (no proposals: such a row has no regions). A row's own
                regions are always used as given; a features file's always win.
                Read by the metrics that use regions: infometic, infoclip, hice.
            max_regions: how many proposed regions are kept: K-means over the
                proposals' boxes keeps the most confident of each of this many
                clusters (InfoMetIC appendix C). Default 20. Given regions are
                not reduced (at most `limits.MAX_REGIONS`, 100, per row).
            infometic_checkpoint: the InfoMetIC checkpoint file (the released
                best_model.pth or a capscope-trained one). Default None:
                CAPSCOPE_INFOMETIC_CHECKPOINT, else <cache>/infometic/
                best_model.pth, else the demo model. A file named here that is
                missing raises `ModelUnavailable` (no demo fallback).
            pacs_checkpoint: the PAC-S checkpoint file (pac-s). Default None:
                CAPSCOPE_PACS_CHECKPOINT, else <cache>/pacs/clip_ViT-B-32.pth.
                PAC-S has no demo fallback.
            pacs_model: the open_clip architecture `pacs_checkpoint` is loaded
                into. Default "ViT-B-32-quickgelu".
            alpha_clip_checkpoint: an Alpha-CLIP visual checkpoint for hice's
                region features (the region's mask in the alpha channel).
                Default None: CAPSCOPE_ALPHA_CLIP_CHECKPOINT, else none: regions
                are masked crops of the main CLIP.
            clip4dm_epsilon: clip4dm's threshold: a semantic word whose
                attribution is below it is wrong. Default -5e-5 (the released
                `main.py --epsilon`).
            clip4dm_layers: how many of the last text blocks clip4dm takes its
                relevance from. Default 3; between 1 and the CLIP's text depth
                (outside it clip4dm is unavailable: `ModelUnavailable`).
            precision: "fp32" (default), "bf16" or "fp16": the CLIP towers run
                in float32 or under bfloat16 / float16 autocast
                (`encoder.AUTOCAST_DTYPES`); what reads their features (the
                InfoMetIC head, the scores) stays in float32. On CUDA, fp32 runs
                with TF32 off (cuDNN's and matmul's TF32 would move scores), so
                GPU numbers stay close to the CPU's. fp16 on a CPU
                works but is slow (a warning says so); bf16 is the CPU's fast
                precision. Rows record it in `model.precision` and `model.dtype`.
            beta: InfoMetIC's β (sec. 3.3), read by infometic and infoclip: a
                word is correct, a region mentioned, above this attention share
                (see `token_rule`; a fine-tuned checkpoint's fitted
                `word_threshold_scale` multiplies the word threshold). Default 0.1.
            token_rule: how infometic and infoclip judge words: "relative"
                (default, everywhere): share > min(β, β·5/n) for n semantic
                words seen, which holds at any caption and window length;
                "paper": share > `beta`, which flags every word of a window
                with more than ten semantic words. hice and clip4dm have their
                own thresholds (docs/formats.md §2.4).
            long_captions: how a caption longer than a metric's model reads
                (InfoMetIC 30 BPE pieces, CLIP 77 tokens) is read
                (`windows.LONG_CAPTIONS`): "windows" (default): the word-level
                metrics read it in windows and judge every word, CLIP-S and
                PAC-S read the first 77 tokens as their papers do; "cut":
                every metric reads what fits, as the released codes do;
                "all-windows": CLIP-S and PAC-S too give the mean over windows.
                Each metric's result says what it read (`windows`, `truncated`).
            spacy_model: the spaCy pipeline that tokenises captions and tags
                semantic words (nouns, verbs, adjectives, numbers, ...), for
                every metric. Default "en_core_web_sm"; when it is not installed,
                `spacy.blank("en")` with a warning (semantic = neither a stop
                word nor punctuation) and rows say "(fallback)" in `model.text`.
            skip_unavailable: when True, a metric whose model cannot be had
                (`ModelUnavailable`, or a missing optional package's
                `ImportError`) is left out and its one-line reason kept in
                `self.unavailable` (the server's way, so that the models that do
                load are loaded once); default False: it raises.
            demo: None (default): the demo model stands in where pretrained
                weights cannot be had (above); True: every metric that has a
                demo model (infometic, and the CLIP of clip-s, infoclip, hice,
                clip4dm) uses it, whatever is installed, so that a run is
                demo as a whole; False: never, a missing weight raises
                `ModelUnavailable` (never a run that mixes real and demo).

        Raises:
            ValueError: an unknown metric name, region source, precision or (when
                infometic or infoclip is asked for) token rule.
            ModelUnavailable: a model cannot be had (missing or unreadable file,
                an open_clip tag not cached while offline, the demo fallback
                unavailable or turned off), or device "cuda" with no GPU
                visible; unless `skip_unavailable`, as for a metric's
                `ImportError`. A device error is raised either way.
        """
        if isinstance(metrics, str):  # Scorer("clip-s") means one metric, not five letters
            metrics = [metrics]
        self.specs = {name: get_spec(name) for name in metrics}
        self.precision = check_precision(precision)
        if regions not in ("given", *PROPOSERS):
            raise ValueError(f"unknown region source {regions!r}; choose from given, {', '.join(PROPOSERS)}")
        self.device = loading.resolve_device(device)
        if precision == "fp16" and self.device.type == "cpu":
            log.warning("--precision fp16 on a CPU: most CPUs have no fp16 arithmetic, and it ran at a fifth of "
                        "fp32's speed here; bf16 is the CPU's fast precision")
        self.region_source, self.max_regions = regions, max_regions
        self.nlp = load_spacy(spacy_model)
        self.text_model = spacy_model if self.nlp.pipe_names else "spacy.blank('en') (fallback)"
        self.demo = False
        self._demo_choice = demo
        self._demo: tuple[InfoMetIC, ClipBackbone] | None = None
        self._proposer = None
        self._regions_cache = LRUCache(REGIONS_CACHE_SIZE)
        self.beta, self.token_rule = beta, token_rule
        self.long_captions = check_long_captions(long_captions)
        self.checkpoints: dict[str, dict] = {}  # role -> file name and sha256, for the rows
        self._provenance: dict | None = None
        shared: dict[str, object] = {}

        def once(key, load):
            def get():
                if key not in shared:
                    shared[key] = load()
                return shared[key]
            return get

        parts = MetricParts(
            main_clip=once("clip", lambda: self._main_clip(clip_model, clip_pretrained, clip_crop)),
            pacs_clip=once("pac-s", lambda: self._pacs_clip(pacs_checkpoint, pacs_model)),
            infometic=once("infometic", lambda: self._infometic(infometic_checkpoint)),
            beta=beta, token_rule=token_rule, alpha_clip_checkpoint=alpha_clip_checkpoint,
            clip4dm_epsilon=clip4dm_epsilon, clip4dm_layers=clip4dm_layers,
            record_file=self._record_file, nlp=self.nlp,
        )
        self.metrics, self.unavailable = {}, {}
        for name, spec in self.specs.items():
            try:
                self.metrics[name] = spec.build(parts)
            except (ModelUnavailable, ImportError) as err:
                if not skip_unavailable:
                    raise
                self.unavailable[name] = str(err).splitlines()[0] if str(err) else type(err).__name__
                log.warning("metric %s left out: %s", name, self.unavailable[name])
        backbones = [shared.get("clip")] + [getattr(m, "backbone", None) for m in self.metrics.values()]
        self.clip_name = next((b.name for b in backbones if b is not None), "none")
        # no metric here reads regions (CLIP-S, PAC-S, CLIP4DM): proposing them would be work no one reads
        self.proposes_regions = regions != "given" and any(self.specs[m].needs.regions for m in self.metrics)

    # ------------------------------------------------------------ models

    def _main_clip(self, model_name, pretrained, crop: CropStyle | None = None) -> ClipBackbone:
        """The CLIP of clip-s, infoclip and hice; `crop` says how a CLIP trained on
        styled region crops (capscope's demo CLIP) wants them."""
        if self._demo_choice:
            return self._required_demo()[1]
        name, tag = model_name or DEFAULT_CLIP[0], pretrained or DEFAULT_CLIP[1]
        try:
            model = loading.create_open_clip(name, tag, self.device)
        except ModelUnavailable:
            demo = None if (model_name or pretrained or self._demo_choice is False) else self._demo_model()
            if demo is None:
                raise
            return demo[1]
        if Path(tag).is_file():
            self._record_file("clip", tag)
        return ClipBackbone.from_model(model, name, f"{name}/{Path(tag).name}", self.device, crop, self.precision)

    def _demo_model(self) -> tuple[InfoMetIC, ClipBackbone] | None:
        """capscope's bundled demo model, when pretrained weights cannot be had
        (and CAPSCOPE_NO_DEMO is not set). Labelled everywhere as a fallback."""
        if self._demo is None:
            path = loading.demo_model_path()
            if os.environ.get("CAPSCOPE_NO_DEMO") or not path.is_file():
                return None
            log.warning("FALLBACK: pretrained weights cannot be had; using capscope's DEMO model (%s), "
                        "which knows coloured shapes, not photos", path.name)
            self._demo = self._load_infometic_file(path, demo=True)
            self.demo = True
            self._record_file("demo", path)
        return self._demo

    def _required_demo(self) -> tuple[InfoMetIC, ClipBackbone]:
        demo = self._demo_model()
        if demo is None:
            raise ModelUnavailable("demo: capscope's demo model is not here (CAPSCOPE_DEMO_MODEL, or "
                                   "CAPSCOPE_NO_DEMO is set)")
        return demo

    def _pacs_clip(self, checkpoint, model_name) -> ClipBackbone:
        path = checkpoint or loading.env_or_cache("CAPSCOPE_PACS_CHECKPOINT", "pacs/clip_ViT-B-32.pth")
        if not checkpoint and not Path(path).is_file() and not os.environ.get("CAPSCOPE_PACS_CHECKPOINT"):
            downloads.fetch_on_first_use("pacs", only="clip_ViT-B-32.pth")
        if not Path(path).is_file():
            raise ModelUnavailable(
                f"PAC-S: checkpoint {path} not found; run `capscope models download pacs`, or pass "
                "--pacs-checkpoint FILE (or set CAPSCOPE_PACS_CHECKPOINT) naming the released clip_ViT-B-32.pth"
            )
        state = loading.load_state_file(path, "PAC-S", "--pacs-checkpoint or CAPSCOPE_PACS_CHECKPOINT")
        model = loading.empty_open_clip(model_name)
        loading.load_clip_state(model, state, str(path))
        self._record_file("pac-s", path)
        return ClipBackbone.from_model(model.to(self.device), model_name, f"PAC-S {model_name}/{Path(path).name}",
                                       self.device, precision=self.precision)

    def _infometic(self, checkpoint) -> tuple[InfoMetIC, ClipBackbone]:
        if self._demo_choice:
            return self._required_demo()
        path = Path(checkpoint or loading.env_or_cache("CAPSCOPE_INFOMETIC_CHECKPOINT", "infometic/best_model.pth"))
        if not checkpoint and not path.is_file() and not os.environ.get("CAPSCOPE_INFOMETIC_CHECKPOINT"):
            downloads.fetch_on_first_use("infometic")
        if not path.is_file():
            demo = None if checkpoint or self._demo_choice is False else self._demo_model()
            if demo is not None:
                return demo
            raise ModelUnavailable(
                f"InfoMetIC: checkpoint {path} not found; run `capscope models download infometic`, or pass "
                "--infometic-checkpoint FILE (or set CAPSCOPE_INFOMETIC_CHECKPOINT) naming the released best_model.pth"
            )
        loaded = self._load_infometic_file(path)
        self._record_file("infometic", path)
        return loaded

    def _record_file(self, role: str, path) -> None:
        """A checkpoint file this scorer loaded: its sha256, taken now, goes into every row."""
        self.checkpoints[role] = checkpoint_digest(path)

    def _load_infometic_file(self, path: Path, demo: bool = False) -> tuple[InfoMetIC, ClipBackbone]:
        raw = loading.read_checkpoint(path, "InfoMetIC")
        model, clip_name = load_infometic(raw, str(path))
        model = model.float().to(self.device).eval()
        crop = CropStyle(**raw["crop"]) if isinstance(raw, dict) and isinstance(raw.get("crop"), dict) else None
        label = f"{clip_name} (demo)" if demo else f"InfoMetIC {clip_name}"
        backbone = ClipBackbone.from_model(model.clip_backbone, clip_name, label, self.device, crop, self.precision)
        return model, backbone

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

    def score_batch(self, rows: list[dict], base_dir: Path | None = None, only: list[str] | None = None) -> list[dict]:
        """Scores many pairs, one output row per input row, in order.

        Args:
            rows: input rows as dicts with the keys of docs/formats.md §2.1:
                "id", "image" (a PIL image or a path), "caption", and optionally
                "references", "regions", "tokens", "features" (as in `score`).
            base_dir: the folder relative image and features paths are read
                from (default: the working directory).
            only: score with these of the loaded metrics only (default: all).

        Returns:
            The output rows as JSON-ready dicts (docs/formats.md §2.2). A row
            that cannot be scored does not raise: it has an "error" line, empty
            "metrics" and a null "model" (docs/formats.md §2.5).

        Raises:
            ModelUnavailable: a region proposer's weights, loaded at its first
                use, cannot be had.
        """
        return [row.to_dict() for row in self.results(rows, base_dir, only)]

    def results(self, rows: list[dict], base_dir: Path | None = None, only: list[str] | None = None) -> list[ScoreRow]:
        """`score_batch`, typed: the same rows as `ScoreRow` objects.

        Args:
            rows: input rows, as for `score_batch`.
            base_dir: the folder relative paths are read from.
            only: score with these of the loaded metrics only (default: all).

        Returns:
            One `result.ScoreRow` per input row, in order; `to_dict()` gives
            the JSON row. A row that cannot be scored has `error` set, no
            `metrics` and `model` None.

        Raises:
            ModelUnavailable: a region proposer's weights cannot be had.
        """
        prepared = [self._prepare(i, row, base_dir) for i, row in enumerate(rows)]
        ready = [p for p in prepared if not p.errors]
        results: dict[int, dict[str, MetricResult]] = {p.index: {} for p in prepared}
        for name, metric in self.metrics.items():
            if only is not None and name not in only:
                continue
            needs = self.specs[name].needs
            usable = [p for p in ready if not needs.pixels or p.image is not None]
            for p in ready:
                if p not in usable:
                    p.errors.append(f"{name} needs pixels; this row gives only a features file")
            usable = [p for p in usable if not (needs.image and self._dim_mismatch(p, metric))]
            if not usable:
                continue
            images = self._image_features(metric, needs, usable) if needs.image else [None] * len(usable)
            global_only = self.specs[name].kind == "global"
            outs = windows.compute(metric, [p.pair for p in usable], images, self.long_captions, global_only)
            for p, out in zip(usable, outs):
                results[p.index][name] = out
        return [self._row(rows[p.index], p, results[p.index]) for p in prepared]

    def _dim_mismatch(self, p: _Prepared, metric) -> bool:
        if p.features is not None and p.features["feat"].shape[1] != metric.backbone.dim:
            p.errors.append(
                f"features file has {p.features['feat'].shape[1]}-d features; {metric.name}'s CLIP gives {metric.backbone.dim}-d"
            )
            return True
        return False

    def _image_features(self, metric, needs: Needs, prepared: list[_Prepared]) -> list[ImageFeatures]:
        out: list[ImageFeatures | None] = [None] * len(prepared)
        pixels = [i for i, p in enumerate(prepared) if p.features is None or needs.pixels]
        if pixels:
            images = [prepared[i].image for i in pixels]
            regions = [prepared[i].regions if needs.regions else [] for i in pixels]
            for i, features in zip(pixels, metric.backbone.image_features(images, regions)):
                out[i] = features
        for i, p in enumerate(prepared):
            if out[i] is None:
                out[i] = features_from_file(p.features)
        return out

    # ------------------------------------------------------------ input rows

    def _prepare(self, index: int, row: dict, base_dir: Path | None) -> _Prepared:
        caption = row.get("caption")
        prepared = _Prepared(index, PreparedPair(caption if isinstance(caption, str) else "", []), None, None)
        try:
            problem = check_caption(caption)
            if problem:
                raise RowError(problem)
            prepared.pair.tokens = self._tokens(caption, row.get("tokens"))
            prepared.pair.references = _references(row.get("references"))
            if row.get("features") is not None:
                prepared.features = read_features(_resolve(row["features"], base_dir))
                prepared.regions = features_from_file(prepared.features).regions
            if row.get("image") is not None:
                prepared.image, prepared.image_name = row_image(row["image"], base_dir)
                if prepared.regions is None:
                    prepared.regions = self._regions(prepared.image, row.get("regions"))
            elif prepared.features is None:
                raise RowError("row has neither an image nor a features file")
        except RowError as err:
            prepared.errors.append(str(err))
        return prepared

    def _tokens(self, caption: str, given) -> list[Token]:
        if given is None:
            return tokenize(caption, self.nlp)
        tokens = []
        for t in given:
            token = Token(t["text"], int(t["start"]), int(t["end"]), bool(t.get("semantic", True)))
            if caption[token.start : token.end] != token.text:
                raise RowError(f"token {token.text!r} does not match caption[{token.start}:{token.end}]")
            tokens.append(token)
        return tokens

    def _regions(self, image: Image.Image, given) -> list[Region]:
        if given is not None:
            return row_regions(given, image.size)
        if not self.proposes_regions:
            return []
        return self._regions_cache.get_or_compute(
            image_key(image), lambda: select_regions(self.proposer().propose(image), self.max_regions))

    def proposer(self):
        """The configured region proposer, loaded once, on the scorer's device."""
        if self._proposer is None:
            self._proposer = PROPOSERS[self.region_source](device=str(self.device))
        return self._proposer

    def _row(self, row: dict, p: _Prepared, metrics: dict[str, MetricResult]) -> ScoreRow:
        image_name = p.image_name or (row.get("image") if isinstance(row.get("image"), str) else None)
        if p.errors and not metrics:  # nothing scored: the id, the error and what names the input, no provenance
            return ScoreRow(id=row.get("id"), image=image_name, caption=row.get("caption"), error="; ".join(p.errors))
        return ScoreRow(
            id=row.get("id"), image=image_name, caption=row.get("caption"),
            tokens=p.pair.tokens, regions=p.regions or [], metrics=metrics,
            model=ModelInfo(self.clip_name, self._regions_label(row, p), self.text_model, self.demo, **self.provenance()),
            error="; ".join(p.errors) or None,
        )

    def provenance(self) -> dict:
        """What a number depends on beyond the model names (versions, dtype,
        device, prompt, β, token rule, checkpoint sha256s); computed once."""
        if self._provenance is None:
            self._provenance = reproducibility(
                dtype=self._compute_dtype(), precision=self.precision, device=self._device_kind(), prompt=PROMPT,
                beta=self.beta,
                token_rule=self.token_rule, long_captions=self.long_captions, checkpoints=self.checkpoints,
                metric_options={name: m.options for name, m in self.metrics.items() if getattr(m, "options", None)})
        return self._provenance

    def _compute_dtype(self) -> str:
        """float32, and the CLIP towers' autocast dtype where they use one (`precision`)."""
        autocast = {m.backbone.autocast_dtype for m in self.metrics.values() if getattr(m, "backbone", None) is not None}
        autocast.discard(None)
        return "float32" + "".join(f", {str(d).removeprefix('torch.')} autocast" for d in autocast)

    def _device_kind(self) -> str:
        if self.device.type == "cuda":
            return f"cuda ({torch.cuda.get_device_name(self.device)})"
        return self.device.type

    def _regions_label(self, row: dict, p: _Prepared) -> str:
        if p.features is not None:
            return "features"
        if row.get("regions") is not None:
            return "given"
        return self.region_source if self.proposes_regions or self.region_source == "given" else NO_REGIONS


# ---------------------------------------------------------------- helpers

def row_regions(given, size: tuple[int, int]) -> list[Region]:
    """A row's own regions, checked against the image size; RowError says what is wrong."""
    try:
        return given_regions(given, *size)
    except (ValueError, AttributeError) as err:
        raise RowError(f"bad regions: {err}") from None


def load_infometic(raw: dict, source: str) -> tuple[InfoMetIC, str]:
    """An InfoMetIC model from the released flat state dict or a capscope checkpoint."""
    if isinstance(raw, dict) and str(raw.get("format", "")).startswith("capscope-infometic"):
        clip_name = raw["clip_model"]
        model = create_clip_from_config(clip_name, raw.get("clip_config"))
        infometic = InfoMetIC(model, HeadConfig(**raw["head_config"]))
        infometic.word_threshold_scale = threshold_scale(raw.get("word_threshold_scale", 1.0), source)
        state = raw["state_dict"]
    else:
        try:
            clip_name = released_backbone_name(raw)
            config = released_head_config(raw)
        except (ValueError, KeyError, AttributeError, TypeError) as err:
            raise ModelUnavailable(f"InfoMetIC: {source} is not an InfoMetIC checkpoint ({err})") from None
        infometic = InfoMetIC(loading.empty_open_clip(clip_name), config)
        state = raw
    try:
        load_strict(infometic, state)
    except (ValueError, RuntimeError) as err:
        raise ModelUnavailable(f"InfoMetIC: {source}: {err}") from None
    return infometic, clip_name


def threshold_scale(value, source: str) -> float:
    """A checkpoint's `word_threshold_scale`: a positive number."""
    try:
        scale = float(value)
    except (TypeError, ValueError):
        scale = math.nan
    if not math.isfinite(scale) or scale <= 0:
        raise ModelUnavailable(f"InfoMetIC: {source}: word_threshold_scale must be a positive number, not {value!r}")
    return scale


def create_clip_from_config(name: str, config: dict | None):
    """An open_clip architecture by name, registering `config` first for a
    custom one (capscope's demo CLIP ships its config inside its checkpoint)
    through open_clip's public `add_model_config`, which reads it from a file."""
    import open_clip

    if config:
        if safe_name(name) != name:  # the name comes from the checkpoint and becomes a file name below
            raise ModelUnavailable(f"InfoMetIC: the checkpoint's CLIP name {shown(name)} is not a plain file name")
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"{name}.json"
            path.write_text(json.dumps(config))
            open_clip.add_model_config(path)
    return loading.empty_open_clip(name)


def row_image(image, base_dir: Path | None = None) -> tuple[Image.Image, str | None]:
    """A row's `image` (a PIL image, or a path relative to `base_dir`) in RGB,
    with the name it was given; RowError when it cannot be read."""
    name = None if isinstance(image, Image.Image) else str(image)
    try:
        return read_image(image if name is None else _resolve(image, base_dir), name=name), name
    except ImageError as err:
        raise RowError(str(err)) from None


def _resolve(path, base_dir: Path | None) -> Path:
    path = Path(str(path))
    return path if path.is_absolute() or base_dir is None else base_dir / path


def _references(refs) -> list[str] | None:
    problem = check_references(refs)
    if problem:
        raise RowError(problem)
    return refs or None


FEATURE_ARRAYS = ("feat", "bbox", "global_feat", "global_bbox", "clustered_bbox")


def read_features(path: Path) -> dict:
    """An official-format InfoMetIC image-features file (.npz)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            features = {k: data[k] for k in FEATURE_ARRAYS}
    except FileNotFoundError:
        raise RowError(f"features file not found: {path.name}") from None
    except KeyError as err:
        raise RowError(f"features file {path.name} lacks array {err}") from None
    except Exception as err:
        raise RowError(f"cannot read features file {path.name}: {type(err).__name__}") from None
    n = len(features["feat"])
    if features["bbox"].shape != (n, 4) or features["global_bbox"].shape != (4,):
        raise RowError(f"features file {path.name}: bbox must be N x 4 and global_bbox 4 values")
    kept = features["clustered_bbox"].astype(np.int64)
    if kept.size and (kept.min() < 0 or kept.max() >= n):
        raise RowError(f"features file {path.name}: clustered_bbox indexes outside its {n} regions")
    features["clustered_bbox"] = kept
    return features


def features_from_file(features: dict) -> ImageFeatures:
    kept = features["clustered_bbox"]
    width, height = float(features["global_bbox"][2]), float(features["global_bbox"][3])
    regions = [Region(tuple(float(v) for v in features["bbox"][i]), None, "features") for i in kept]
    feats = torch.from_numpy(np.asarray(features["feat"], dtype=np.float32)[kept]).reshape(len(kept), -1)
    return ImageFeatures(
        (width, height), regions, torch.from_numpy(np.asarray(features["global_feat"], dtype=np.float32)), feats,
    )


def write_features(path: Path, all_feats: torch.Tensor, all_boxes, global_feat: torch.Tensor, size, kept: list[int]) -> None:
    np.savez(
        path,
        feat=all_feats.numpy().astype(np.float32),
        bbox=np.asarray(all_boxes, dtype=np.float32).reshape(-1, 4),
        global_feat=global_feat.numpy().astype(np.float32),
        global_bbox=np.array([0, 0, size[0], size[1]], dtype=np.float32),
        clustered_bbox=np.asarray(kept, dtype=np.int64),
    )
