"""What both trainers share: their progress, their budget and their learning-rate schedule."""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class TrainState:
    step: int = 0
    elapsed: float = 0.0              # seconds of training, summed over resumes
    loss_history: list = field(default_factory=list)   # (step, mean loss since last record)
    probes: list = field(default_factory=list)         # (step, figures)


def budget_spent(state: TrainState, steps: int | None, minutes: float | None) -> bool:
    """True once the step budget or the time budget (whichever is given and nearer) is used up."""
    return bool((steps and state.step >= steps) or (minutes and state.elapsed >= 60 * minutes))


def warmup_cosine(base_lr: float, step: int, elapsed_s: float, *, warmup_steps: int, minutes: float | None,
                  steps: int | None, floor: float) -> float:
    """Linear warm-up, then cosine from `base_lr` down to `floor * base_lr` over the
    budget (time or steps, whichever is nearer its end)."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    progress = 0.0
    if minutes:
        progress = max(progress, elapsed_s / (60 * minutes))
    if steps:
        progress = max(progress, step / steps)
    progress = min(progress, 1.0)
    return base_lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))
