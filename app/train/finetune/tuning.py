"""The fine-tuning run, `finetune(config)`: the parent loaded, the items split
and encoded, the head trained, the child rated and saved (the package's
docstring says what it trains and with which losses)."""
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
from capscope.train.finetune.checkpoints import Parent, load_parent, save_child
from capscope.train.finetune.figures import check_figures, figures_path, held_figures
from capscope.train.finetune.labels import (Split, label_counts, replay_items, resolved_replay, split_by_image,
                                           swapped_items)
from capscope.train.finetune.loop import keep_parent_outputs, train_head
from capscope.train.finetune.settings import FinetuneConfig, FinetuneError
from capscope.train.finetune.tensors import Augment, VisualTop, encode_items, names_a_side, preprocess_normalization
from capscope.train.finetune.threshold import fitted_threshold


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
