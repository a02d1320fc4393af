"""Where a Scorer's models come from, and what stands in when they cannot be
had: each pretrained file is the option, else its environment variable, else
capscope's cache (fetched there on first use when online); when InfoMetIC or
the default CLIP cannot be had and was not named, capscope's demo model stands
in, with a warning (the demo-fallback policy). Every checkpoint file loaded is
recorded with its sha256, for the rows' provenance."""
from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from pathlib import Path

import torch

from capscope.common.errors import ModelUnavailable
from capscope.common.jsonl import shown
from capscope.common.paths import safe_name

from . import downloads, loading
from .encoder import ClipBackbone, CropStyle
from .infometic import InfoMetIC, HeadConfig, load_strict, released_backbone_name, released_head_config
from .result import checkpoint_digest

log = logging.getLogger("capscope.metrics.scorer")  # the warnings users know by this name

DEFAULT_CLIP = ("ViT-B-32", "openai")


class ModelSources:
    """Loads a Scorer's models on `device` at `precision`. `demo_choice`:
    None, the demo model stands in where weights cannot be had; True, it is
    used wherever it can be; False, never. After loading, `demo` says whether
    it stood in and `checkpoints` maps a role to the {"file", "sha256"} of each
    checkpoint file loaded."""

    def __init__(self, device: torch.device, precision: str, demo_choice: bool | None, runtime: str = "eager"):
        self.device, self.precision, self.demo_choice = device, precision, demo_choice
        self.runtime = runtime  # of the CLIP text towers (metrics/runtime.py)
        self.demo = False
        self.checkpoints: dict[str, dict] = {}
        self._demo: tuple[InfoMetIC, ClipBackbone] | None = None
        self.loaded: dict[str, object] = {}  # what `once` loaded, by key

    def once(self, key: str, load):
        """`load` as a function that runs it at its first call only: the
        metrics that read the same CLIP share one copy."""
        def get():
            if key not in self.loaded:
                self.loaded[key] = load()
            return self.loaded[key]
        return get

    def main_clip(self, model_name, pretrained, crop: CropStyle | None = None) -> ClipBackbone:
        """The CLIP of clip-s, infoclip and hice; `crop` says how a CLIP trained on
        styled region crops (capscope's demo CLIP) wants them."""
        if self.demo_choice:
            return self._required_demo()[1]
        name, tag = model_name or DEFAULT_CLIP[0], pretrained or DEFAULT_CLIP[1]
        try:
            model = loading.create_open_clip(name, tag, self.device)
        except ModelUnavailable:
            demo = None if (model_name or pretrained or self.demo_choice is False) else self._demo_model()
            if demo is None:
                raise
            return demo[1]
        if Path(tag).is_file():
            self.record_file("clip", tag)
        return ClipBackbone.from_model(model, name, f"{name}/{Path(tag).name}", self.device, crop, self.precision,
                                      self.runtime)

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
            self.record_file("demo", path)
        return self._demo

    def _required_demo(self) -> tuple[InfoMetIC, ClipBackbone]:
        demo = self._demo_model()
        if demo is None:
            raise ModelUnavailable("demo: capscope's demo model is not here (CAPSCOPE_DEMO_MODEL, or "
                                   "CAPSCOPE_NO_DEMO is set)")
        return demo

    def pacs_clip(self, checkpoint, model_name) -> ClipBackbone:
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
        self.record_file("pac-s", path)
        return ClipBackbone.from_model(model.to(self.device), model_name, f"PAC-S {model_name}/{Path(path).name}",
                                       self.device, precision=self.precision, runtime=self.runtime)

    def infometic(self, checkpoint) -> tuple[InfoMetIC, ClipBackbone]:
        if self.demo_choice:
            return self._required_demo()
        path = Path(checkpoint or loading.env_or_cache("CAPSCOPE_INFOMETIC_CHECKPOINT", "infometic/best_model.pth"))
        if not checkpoint and not path.is_file() and not os.environ.get("CAPSCOPE_INFOMETIC_CHECKPOINT"):
            downloads.fetch_on_first_use("infometic")
        if not path.is_file():
            demo = None if checkpoint or self.demo_choice is False else self._demo_model()
            if demo is not None:
                return demo
            raise ModelUnavailable(
                f"InfoMetIC: checkpoint {path} not found; run `capscope models download infometic`, or pass "
                "--infometic-checkpoint FILE (or set CAPSCOPE_INFOMETIC_CHECKPOINT) naming the released best_model.pth"
            )
        loaded = self._load_infometic_file(path)
        self.record_file("infometic", path)
        return loaded

    def record_file(self, role: str, path) -> None:
        """A checkpoint file this scorer loaded: its sha256, taken now, goes into every row."""
        self.checkpoints[role] = checkpoint_digest(path)

    def _load_infometic_file(self, path: Path, demo: bool = False) -> tuple[InfoMetIC, ClipBackbone]:
        raw = loading.read_checkpoint(path, "InfoMetIC")
        model, clip_name = load_infometic(raw, str(path))
        model = model.float().to(self.device).eval()
        crop = CropStyle(**raw["crop"]) if isinstance(raw, dict) and isinstance(raw.get("crop"), dict) else None
        label = f"{clip_name} (demo)" if demo else f"InfoMetIC {clip_name}"
        backbone = ClipBackbone.from_model(model.clip_backbone, clip_name, label, self.device, crop, self.precision,
                                           self.runtime)
        return model, backbone


# ---------------------------------------------------------------- checkpoints

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
