"""The training loop of a fine-tuning (train_head): batches drawn by region
count, the losses of `losses`, AdamW on the head (and the top of the
image tower), to a budget of steps or minutes."""
from __future__ import annotations

import time

import numpy as np
import torch
from tqdm import tqdm

from capscope.train.finetune.settings import Cancelled, FinetuneConfig
from capscope.train.finetune.losses import anchor_loss, parent_loss, region_loss, token_losses
from capscope.train.finetune.tensors import Augment, LabelledSet, VisualTop
from capscope.train.schedule import TrainState, budget_spent, warmup_cosine

FROZEN = ("verifier.bias_scale",)   # the verifier's weight in the text attention stays the parent's


@torch.no_grad()
def keep_parent_outputs(model, data: LabelledSet, items, device, batch: int = 64) -> None:
    """The parent's text and region log-attention on `items`, the targets of parent_loss."""
    model.eval()
    data.teacher = [None] * len(data.inputs)
    wanted = set(items)
    for bucket in data.buckets().values():     # items of one bucket have as many regions: they stack
        chosen = [i for i in bucket if i in wanted]
        for start in range(0, len(chosen), batch):
            part = chosen[start : start + batch]
            out = model.outputs(*data.batch(part, device)[0])
            for k, i in enumerate(part):
                data.teacher[i] = (out["text_log_attention"][k].cpu(), out["region_log_attention"][k].cpu())


def trainable_parameters(model, visual: VisualTop | None) -> list[torch.Tensor]:
    """The head's parameters (less FROZEN), and the image tower's top with `visual`."""
    head = {id(p) for p in model.head_parameters()}
    chosen = [p for name, p in model.named_parameters()
              if id(p) in head and p.requires_grad and name not in FROZEN]
    for p in visual.parameters() if visual is not None else []:
        p.requires_grad_(True)
        chosen.append(p)
    return chosen


def train_head(model, data: LabelledSet, config: FinetuneConfig, device, visual: VisualTop | None = None,
               augment: Augment | None = None) -> dict:
    """Train to the budget of `config`; returns what the training was, for the report."""
    trainable = trainable_parameters(model, visual)
    parent = [p.detach().clone() for p in trainable]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=0.0)
    buckets = data.buckets()
    state, losses = TrainState(), []
    bar = tqdm(total=config.steps, desc="fine-tune infometic", unit="step", disable=not config.progress,
               mininterval=5.0)
    model.train()
    while not budget_spent(state, config.steps, config.minutes):
        if config.should_stop is not None and config.should_stop():
            raise Cancelled()
        started = time.monotonic()
        for group in optimizer.param_groups:
            group["lr"] = warmup_cosine(config.lr, state.step, state.elapsed, warmup_steps=10,
                                        minutes=config.minutes, steps=config.steps, floor=0.1)
        rng = np.random.default_rng(np.random.SeedSequence([config.seed, 23, state.step]))
        index = batch_index(buckets, config.batch_size, rng)
        loss = step_loss(model, data, index, config, device, rng, visual, augment, (trainable, parent))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        state.elapsed += time.monotonic() - started
        state.step += 1
        bar.update(1)
        config.report_progress({"stage": "training", "step": state.step, "loss": losses[-1],
                                "fraction": _fraction(state, config.steps, config.minutes)})
    bar.close()
    model.eval()
    return training_record(config, state, losses, visual, augment)


def step_loss(model, data: LabelledSet, index: list[int], config: FinetuneConfig, device, rng, visual, augment,
              anchored: tuple[list, list]) -> torch.Tensor:
    """The loss on the items `index` (the trained weights and the parent's in `anchored`)."""
    inputs, piece_labels, region_labels = data.batch(index, device, visual, augment, rng)
    out = model.outputs(*inputs)
    loss = (token_losses(out, piece_labels, config.token_rule, config.balanced_shares)
            + region_loss(out, region_labels))
    loss = loss + config.anchor * anchor_loss(*anchored)
    if config.keep_parent:
        loss = loss + config.keep_parent * parent_loss(out, data.parent_targets(index, device))
    return loss


def batch_index(buckets: dict[int, list[int]], batch_size: int, rng: np.random.Generator) -> list[int]:
    """A batch of items of one bucket (each bucket drawn as often as it has items), without repeats."""
    weights = np.array([len(v) for v in buckets.values()], dtype=float)
    bucket = list(buckets.values())[int(rng.choice(len(buckets), p=weights / weights.sum()))]
    return [bucket[int(i)] for i in rng.choice(len(bucket), size=min(batch_size, len(bucket)), replace=False)]


def training_record(config: FinetuneConfig, state: TrainState, losses: list[float], visual, augment) -> dict:
    return {"steps": state.step, "minutes": round(state.elapsed / 60, 2), "seed": config.seed, "lr": config.lr,
            "anchor": config.anchor, "keep_parent": config.keep_parent,
            "balanced_shares": config.balanced_shares,
            "augment": None if augment is None else ("brightness, contrast, mirror" if augment.mirror
                                                     else "brightness, contrast"),
            "batch_size": config.batch_size, "trained": config.train,
            "visual_blocks": config.visual_blocks if visual is not None else 0,
            "first_loss": round(float(np.mean(losses[:10])), 4) if losses else None,
            "last_loss": round(float(np.mean(losses[-10:])), 4) if losses else None}


def _fraction(state, steps: int | None, minutes: float | None) -> float:
    parts = [state.step / steps] if steps else []
    if minutes:
        parts.append(state.elapsed / (60 * minutes))
    return min(max(parts, default=0.0), 1.0)
