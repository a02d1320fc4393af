"""`capscope train infometic`: the InfoMetIC multi-task recipe (Hu et al. 2023,
sec. 3.2 and 4.1) on a frozen CLIP, from a training file or from demo scenes.

The run's setup (configuration, CLIP, head, session) is in
`train.infometic_setup`, the losses of a step in `train.infometic_losses`
(docs/train-infometic.md says why each is there), saving, resuming and the
held-out probe in `train.infometic_checkpoints`; this module opens a session
and runs the loop to the budget.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np
import torch
from tqdm import tqdm

from capscope.bench.evaluate import evaluate_gold as bench_evaluate_gold
from capscope.metrics.loading import resolve_device
from capscope.metrics.text import load_spacy
from capscope.train.infometic_checkpoints import checkpoint, load_training
from capscope.train.infometic_data import DemoSource, FileSource, Texts, cached_bank, encode_bank, state_fingerprint
from capscope.train.infometic_losses import step_losses, total_loss
from capscope.train.infometic_setup import InfoTrainConfig, Session, bank_path, load_clip, make_backbone, new_head
from capscope.train.schedule import TrainState, budget_spent, warmup_cosine

log = logging.getLogger(__name__)

WARMUP_STEPS = 30


def pick_images(bank_buckets: dict, rng, batch_size: int) -> list[int]:
    """A batch of images sharing one region count, buckets drawn by size."""
    usable = {n: idx for n, idx in bank_buckets.items() if len(idx) >= 2}
    counts = np.array([len(v) for v in usable.values()], dtype=float)
    n = list(usable)[int(rng.choice(len(usable), p=counts / counts.sum()))]
    chosen = rng.choice(len(usable[n]), size=min(batch_size, len(usable[n])), replace=False)
    return [usable[n][int(i)] for i in chosen]


def learning_rate(config: InfoTrainConfig, state: TrainState) -> float:
    return warmup_cosine(config.lr, state.step, state.elapsed, warmup_steps=WARMUP_STEPS,
                         minutes=config.minutes, steps=config.steps, floor=0.05)


def finished(config: InfoTrainConfig, state: TrainState) -> bool:
    return budget_spent(state, config.steps, config.minutes)


def open_session(config: InfoTrainConfig) -> Session:
    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    torch.manual_seed(config.seed)
    clip, name, clip_config, crop = load_clip(config, device)
    backbone = make_backbone(clip, name, crop, device)
    nlp = load_spacy()
    source = FileSource(config.data, nlp) if config.data else DemoSource(config.demo_scenes, config.seed)
    key = f"{source.bank_key()}:{state_fingerprint(clip)}:{crop}"
    bank = cached_bank(bank_path(config.out), key,
                       lambda: encode_bank(backbone, source.images(), len(source), config.progress))
    model = new_head(clip, backbone.dim, config).to(device)
    optimizer = torch.optim.AdamW(model.head_parameters(), lr=config.lr, weight_decay=config.weight_decay)
    state = TrainState()
    if config.resume:
        state = load_training(model, optimizer, config)
    return Session(config, model, name, clip_config, crop, bank, source, Texts(backbone, nlp), optimizer, state, device)


def train_infometic(config: InfoTrainConfig, evaluate_gold: Callable | None = None) -> TrainState:
    """Train to the budget, checkpointing as it goes. With `config.probe_gold`,
    each checkpoint is scored on that gold file by `evaluate_gold` (default:
    capscope.bench.evaluate.evaluate_gold; tests pass a stand-in)."""
    s = open_session(config)
    s.evaluate_gold = evaluate_gold or bench_evaluate_gold
    buckets = s.bank.buckets()
    log.info("training InfoMetIC head on %s from step %d (%.1f min done); %d images; checkpoint %s",
             s.device, s.state.step, s.state.elapsed / 60, len(s.bank), config.out)
    bar = tqdm(total=config.steps, initial=s.state.step, desc="train infometic", unit="step",
               disable=not config.progress, mininterval=5.0)
    last_save, window = time.monotonic(), []
    s.model.train()
    while not finished(config, s.state):
        started = time.monotonic()
        window.append(train_step(s, buckets))
        s.state.elapsed += time.monotonic() - started
        s.state.step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean([w['total'] for w in window[-20:]]):.3f}", min=f"{s.state.elapsed / 60:.1f}")
        if time.monotonic() - last_save >= 60 * config.checkpoint_minutes:
            checkpoint(s, window, bar)
            last_save, window = time.monotonic(), []
    bar.close()
    checkpoint(s, window, bar)
    return s.state


def train_step(s: Session, buckets) -> dict:
    rng = np.random.default_rng(np.random.SeedSequence([s.config.seed, 11, s.state.step]))
    images = pick_images(buckets, rng, s.config.batch_size)
    draws = [s.source.draw(i, rng) for i in images]
    for group in s.optimizer.param_groups:
        group["lr"] = learning_rate(s.config, s.state)
    losses = step_losses(s.model, s.bank, s.texts, s.source, draws, images, s.config, s.device)
    loss = total_loss(losses, s.config)
    s.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(s.model.head_parameters(), 1.0)
    s.optimizer.step()
    return {"total": float(loss.detach()), **{k: float(v.detach()) for k, v in losses.items()}}
