"""What a `capscope train infometic` run is set up from: its configuration
(`InfoTrainConfig`), the frozen CLIP and the new InfoMetIC head on it, the
`Session` a run holds, and where its state and feature files go beside the
checkpoint."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import open_clip

from capscope.demo.clip_model import DEMO_CLIP_CONFIG, DEMO_CLIP_MODEL, config_path_beside, load_demo_clip
from capscope.metrics import loading
from capscope.metrics.encoder import ClipBackbone, CropStyle
from capscope.metrics.infometic import HeadConfig, InfoMetIC
from capscope.train.schedule import TrainState

DEMO_CROP = {"margin": 0.15, "canvas": 128}
PLAIN_CROP = {"margin": 0.0, "canvas": None}


@dataclass
class InfoTrainConfig:
    out: Path
    clip: Path | None = None               # demo CLIP checkpoint (open_clip state dict + config beside)
    clip_model: str | None = None          # or any open_clip model ...
    clip_pretrained: str | None = None     # ... with its tag or file
    data: Path | None = None               # training file; None = demo scenes
    demo_scenes: int = 4000
    minutes: float | None = 15.0
    steps: int | None = None
    seed: int = 0
    device: str = "auto"
    threads: int | None = None
    resume: bool = False
    batch_size: int = 16
    shifts: int = 3                        # in-batch negatives per image / per caption
    lr: float = 7e-4
    weight_decay: float = 0.01
    intra_layers: int = 2
    inter_layers: int = 2
    coarse_weight: float = 3.0
    fine_weight: float = 1.0
    verify_weight: float = 1.0
    grounding_weight: float = 0.5
    checkpoint_minutes: float = 5.0
    probe_gold: Path | None = None         # gold file scored at each checkpoint
    half: bool = False                     # save fp16 weights
    crop_margin: float | None = None
    crop_canvas: int | None = None
    progress: bool = True


# ---------------------------------------------------------------- CLIP

def load_clip(config: InfoTrainConfig, device):
    """(open_clip model, name, config dict for the checkpoint, crop style dict)."""
    if config.clip is not None:
        model = load_demo_clip(config.clip)
        beside = config_path_beside(config.clip)
        clip_config = json.loads(beside.read_text()) if beside.is_file() else DEMO_CLIP_CONFIG
        name, crop = DEMO_CLIP_MODEL, dict(DEMO_CROP)
    else:
        name = config.clip_model or "ViT-B-32"
        model = loading.create_open_clip(name, config.clip_pretrained or "openai", device)
        clip_config = open_clip.get_model_config(name)
        crop = dict(PLAIN_CROP)
    if config.crop_margin is not None:
        crop["margin"] = config.crop_margin
    if config.crop_canvas is not None:
        crop["canvas"] = config.crop_canvas or None
    for p in model.parameters():
        p.requires_grad_(False)
    return model.to(device).eval(), name, clip_config, crop


def make_backbone(model, name: str, crop: dict, device):
    return ClipBackbone.from_model(model, name, name, device, CropStyle(**crop))


def new_head(clip_model, dim: int, config: InfoTrainConfig):
    head = HeadConfig(width=dim, heads=max(dim // 32, 1), intra_layers=config.intra_layers,
                      inter_layers=config.inter_layers, text_positions=True, evidence=True, verify=True)
    return InfoMetIC(clip_model, head)


# ---------------------------------------------------------------- a run

def state_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".train.pt")


def bank_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".features.pt")


@dataclass
class Session:
    """Everything a training run holds."""

    config: InfoTrainConfig
    model: object
    clip_name: str
    clip_config: dict
    crop: dict
    bank: object
    source: object
    texts: object
    optimizer: object
    state: TrainState
    device: object
    evaluate_gold: Callable | None = None  # the probe's evaluator (bench.evaluate.evaluate_gold)
