"""Fine-tuning an InfoMetIC-family checkpoint on a team's own token and region
labels (`capscope train infometic --labels FILE | --dataset NAME --init ...`).

The labels are CapTokenEval items (docs/formats.md §3): a token labelled
"correct"/"incorrect" supervises the text side, a region labelled
"mentioned"/"unmentioned" the vision side; a null label is unknown and
supervises nothing. CLIP's text tower stays frozen, so every caption is
encoded once; with `train="visual"` the top `visual_blocks` blocks of the image
tower train (VisualTop: the frozen stem runs once per crop), else the head alone.

Losses on the labelled items:
- each labelled word's share of the text attention against the token rule's
  threshold (share_loss: what decides the verdict), every word weighing the same;
- the token verifier's per-piece logits, class-balanced BCE (capscope
  checkpoints), or eq. 9 of the paper for a checkpoint without a verifier;
- eq. 10 on the region attention (the mass on mentioned regions) and a
  BCE pushing labelled-unmentioned regions below the null slot;
- not forgetting: an L2 pull of every trained weight towards the parent's
  (L2-SP, Li et al. 2018), `anchor` times the squared distance; the parent's
  own world replayed (replay_items), where the child is also pulled towards
  the parent's own attention (parent_loss, `keep_parent`).
docs/fine-tuning.md says what was measured with other choices.

The run is here (finetune); its parts are finetune_config (what is asked),
finetune_labels (which items, split how), finetune_tensors (the items as the
head's inputs, the image tower's trained top), finetune_losses, finetune_loop
(train_head), finetune_threshold (the child's fitted word threshold),
finetune_checkpoints (parent in, child out) and finetune_report (the figures
and the printed table). Their names are offered here too.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from capscope.bench.evaluate import evaluate_gold as bench_evaluate_gold
from capscope.common.checksums import file_sha256
from capscope.metrics.encoder import ClipBackbone, CropStyle
from capscope.metrics.families import InfoFamilyMetric
from capscope.metrics.loading import resolve_device
from capscope.train.finetune_checkpoints import Parent, load_parent, parent_half, save_child
from capscope.train.finetune_config import TRAIN_PARTS, Cancelled, CheckSet, FinetuneConfig, FinetuneError
from capscope.train.finetune_labels import (
    Split, WordKinds, items_sha256, label_counts, labelled, replay_items, resolved_replay, slot, split_by_image,
    swapped_items,
)
from capscope.train.finetune_losses import anchor_loss, parent_loss, region_loss, share_loss, token_losses
from capscope.train.finetune_loop import FROZEN, keep_parent_outputs, train_head, trainable_parameters
from capscope.train.finetune_report import FIGURE_KEYS, check_figures, figures_path, format_report, held_figures
from capscope.train.finetune_tensors import (
    SIDE_WORDS, UNKNOWN, Augment, LabelledSet, VisualTop, clip_inputs, encode_items, mirror_boxes, names_a_side,
    preprocess_normalization,
)
from capscope.train.finetune_threshold import fitted_threshold

__all__ = [
    "FIGURE_KEYS", "FROZEN", "SIDE_WORDS", "TRAIN_PARTS", "UNKNOWN", "Augment", "Cancelled", "CheckSet",
    "FinetuneConfig", "FinetuneError", "LabelledSet", "Split", "VisualTop", "WordKinds", "anchor_loss",
    "check_figures", "clip_inputs", "encode_items", "figures_path", "finetune", "format_report", "held_figures",
    "items_sha256", "keep_parent_outputs", "label_counts", "labelled", "load_parent", "mirror_boxes",
    "names_a_side", "parent_half", "parent_loss", "preprocess_normalization", "region_loss", "replay_items",
    "resolved_replay", "share_loss", "slot", "split_by_image", "swapped_items", "token_losses", "train_head",
    "trainable_parameters",
]


def finetune(config: FinetuneConfig, evaluate_gold: Callable | None = None) -> dict:
    """Fine-tune, save the child checkpoint atomically at `config.out` and the
    before/after figures beside it; returns the report. `evaluate_gold` gives
    the figures (default: capscope.bench.evaluate.evaluate_gold); with
    `config.fit_threshold` the child's word threshold is fitted on its
    training items (else its scale stays 1).
    Raises Cancelled (nothing written) when `should_stop` turns true."""
    evaluate_gold = evaluate_gold or bench_evaluate_gold
    device = _torch_device(config)
    split = split_by_image(config.items, config.holdout, config.seed)
    if not split.train:
        raise FinetuneError("no labelled item left to train on after the hold-out")
    config.check_parts()
    parent = load_parent(config.init, device)
    report = _first_report(config, split)
    config.report_progress({"stage": "figures before", "fraction": 0.0})
    report["before"] = held_figures(config, config.init, split.held, evaluate_gold)
    training = _train(config, parent, split, report, device)
    config.report_progress({"stage": "figures after", "fraction": 1.0})
    with tempfile.TemporaryDirectory(prefix="capscope-child-") as scratch:
        # the child is scored through the Scorer, from a file: a scratch copy until its figures go inside
        _rate_child(config, parent, Path(scratch) / Path(config.out).name, split, report, training, evaluate_gold)
    report["training"] = training
    save_child(Path(config.out), parent, report, training)
    figures_path(config.out).write_text(json.dumps(report, indent=1))
    return report


def _torch_device(config: FinetuneConfig) -> torch.device:
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    return resolve_device(config.device)


def _first_report(config: FinetuneConfig, split: Split) -> dict:
    return {"parent": {"file": Path(config.init).name, "sha256": file_sha256(config.init)},
            "labels": {**config.labels, "train": label_counts(split.train), "held_out": label_counts(split.held)},
            "holdout": {"share": config.holdout, "images": len(split.held_images), "seed": config.seed},
            "token_rule": config.token_rule}


def _train(config: FinetuneConfig, parent: Parent, split: Split, report: dict, device) -> dict:
    """The training items encoded (the team's, their swapped copies, the parent's
    world replayed), then the training loop; returns its record."""
    model = parent.model
    backbone = ClipBackbone.from_model(model.clip_backbone, parent.clip_name, parent.clip_name, device,
                                       CropStyle(**parent.crop))
    metric = InfoFamilyMetric("infometic", backbone, None)  # prepares text only: decides nothing
    config.report_progress({"stage": "encoding", "fraction": 0.0})
    swaps = swapped_items(split.train, np.random.default_rng(config.seed), config.swaps) if config.swaps else []
    report["labels"]["swapped_copies"] = len(swaps)
    visual = VisualTop(model.clip_backbone.visual, config.visual_blocks) if config.train == "visual" else None
    augment = None
    if config.augment:
        augment = Augment(*preprocess_normalization(backbone.preprocess), mirror=not names_a_side(split.train))
    source = resolved_replay(config.replay, config.init)
    with tempfile.TemporaryDirectory(prefix="capscope-replay-") as scratch:
        replay = replay_items(source, config.replay_items, config.seed, Path(scratch))
        if replay:
            report["labels"]["replay"] = {"from": Path(str(source)).name, **label_counts(replay)}
        data = encode_items(backbone, metric, split.train + swaps + replay, config.base_dir, config.progress, visual,
                            keep_pixels=augment is not None)
    if replay and config.keep_parent:
        keep_parent_outputs(model, data, range(len(data.inputs) - len(replay), len(data.inputs)), device)
    return train_head(model, data, config, device, visual, augment)


def _rate_child(config: FinetuneConfig, parent: Parent, unrated: Path, split: Split, report: dict, training: dict,
                evaluate_gold) -> None:
    """The child saved at `unrated`, its word threshold fitted, its figures into the report."""
    save_child(unrated, parent, report, training)
    if config.fit_threshold:
        config.report_progress({"stage": "fitting the word threshold", "fraction": 1.0})
        report["word_threshold"] = fitted_threshold(config, unrated, split.train)
        save_child(unrated, parent, report, training)
    report["after"] = held_figures(config, unrated, split.held, evaluate_gold)
    if config.check is not None:
        report["check_gold"] = {**config.check.source,
                                "before": check_figures(config, config.init, evaluate_gold),
                                "after": check_figures(config, unrated, evaluate_gold)}
