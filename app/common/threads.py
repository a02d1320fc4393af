"""Small tensor work on one thread.

On a CPU, PyTorch splits every operation over its intra-op threads; for the
tiny batches of an interactive re-score (one caption and its phrases, a few
hundred token rows) the threads spend more time synchronising than computing,
and on a machine shared with other processes a waiting thread can stall every
layer. Measured on a busy 2-core machine: a HICE-S re-score took 285 ms (p50)
on two threads and 64 ms on one; an InfoMetIC re-score of one pair in the
server 0.8 s on two threads and 10 ms on one.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SMALL_WORK = 512  # token rows (batch x length) below which one thread is faster


@contextmanager
def few_threads(work: int = 0, limit: int = SMALL_WORK, device: torch.device | None = None):
    """One intra-op thread for the block when `work` is at most `limit` on the
    CPU; with no `work` given (one pair, as the server scores), always."""
    import torch  # here, so that importing this module (the server does) does not load torch

    threads = torch.get_num_threads()
    if work > limit or threads == 1 or (device is not None and device.type != "cpu"):
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
