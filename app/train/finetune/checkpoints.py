"""The checkpoints of a fine-tuning: the parent read (load_parent), the child
written in the parent's layout (save_child), and a checkpoint scored through
the Scorer, as a user would score it (checkpoint_scorer)."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import open_clip
import torch

from capscope.demo.clip_model import write_atomically
from capscope.metrics.infometic import capscope_checkpoint
from capscope.metrics.loading import read_checkpoint
from capscope.metrics.model_sources import load_infometic
from capscope.metrics.scorer import Scorer
from capscope.train.finetune.settings import FinetuneConfig
from capscope.train.infometic_setup import PLAIN_CROP


class Parent(NamedTuple):
    model: object           # the InfoMetIC model, float32, CLIP frozen; it becomes the child as it trains
    clip_name: str
    clip_config: dict
    crop: dict
    raw: object             # the checkpoint as read


def load_parent(path: Path, device) -> Parent:
    """(InfoMetIC model in float32, clip name, clip config, crop dict, raw checkpoint)."""
    raw = read_checkpoint(path, "InfoMetIC", "--init")
    model, clip_name = load_infometic(raw, str(path))
    capscope_format = isinstance(raw, dict) and "head_config" in raw
    crop = dict(raw["crop"]) if capscope_format and isinstance(raw.get("crop"), dict) else dict(PLAIN_CROP)
    clip_config = raw.get("clip_config") if capscope_format else None
    clip_config = clip_config or open_clip.get_model_config(clip_name)
    for p in model.clip_backbone.parameters():
        p.requires_grad_(False)
    return Parent(model.float().to(device), clip_name, clip_config, crop, raw)


def parent_half(raw) -> bool:
    """Whether the parent's head weights were saved in fp16 (the child is saved the same way)."""
    state = raw.get("state_dict", raw) if isinstance(raw, dict) else {}
    heads = [v for k, v in state.items() if not k.startswith("clip_backbone.") and torch.is_tensor(v)
             and v.is_floating_point()]
    return bool(heads) and all(v.dtype == torch.float16 for v in heads)


def save_child(out: Path, parent: Parent, report: dict, training: dict) -> None:
    """The trained model, in the parent's layout and precision, with what the report says of it."""
    half = parent_half(parent.raw)
    child = capscope_checkpoint(parent.model, parent.clip_name, parent.clip_config, crop=dict(parent.crop),
                                training=training, parent=report["parent"], labels=report["labels"],
                                figures={k: report.get(k) for k in ("before", "after", "check_gold") if k in report})
    child["word_threshold_scale"] = report.get("word_threshold", {}).get("scale", 1.0)
    child["state_dict"] = {k: (v.half() if half and v.is_floating_point() else v).detach().cpu().clone()
                           for k, v in child["state_dict"].items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, lambda tmp: torch.save(child, tmp))


def checkpoint_scorer(config: FinetuneConfig, checkpoint: Path):
    return Scorer(["infometic"], device=config.device, regions="given", infometic_checkpoint=str(checkpoint),
                  token_rule=config.token_rule)
