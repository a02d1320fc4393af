"""The learning-rate schedule both trainers share."""
from __future__ import annotations

import math


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
