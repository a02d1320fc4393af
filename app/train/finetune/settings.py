"""What a fine-tuning run is asked to do (FinetuneConfig, CheckSet) and the
two ways it stops early (FinetuneError, Cancelled)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from capscope.common.errors import CapscopeError
from capscope.common.jsonl import read_json_lines
from capscope.train.finetune.defaults import HOLDOUT, MINUTES

TRAIN_PARTS = ("head", "visual")


class FinetuneError(CapscopeError, ValueError):
    """Labels or a checkpoint that cannot be fine-tuned on; says why."""


class Cancelled(Exception):
    """Raised inside the loop when `should_stop` says so; nothing is written."""


@dataclass
class FinetuneConfig:
    out: Path
    init: Path                              # the parent checkpoint file
    items: list[dict]                       # CapTokenEval items
    base_dir: Path                          # where the items' relative image paths start
    labels: dict                            # what the labels are, recorded in the checkpoint
    holdout: float = HOLDOUT                # share of images held out for the figures
    minutes: float | None = MINUTES
    steps: int | None = None
    seed: int = 0
    device: str = "auto"
    threads: int | None = None
    batch_size: int = 32
    lr: float = 5e-4
    anchor: float = 0.05                    # L2-SP weight
    swaps: int = 2                          # swapped copies per fully-correct item (swapped_items)
    train: str = "visual"                   # "head": the head alone; "visual": also the top of CLIP's image tower
    visual_blocks: int = 4                  # blocks of the image tower that train with "visual" (all of the demo CLIP's)
    token_rule: str = "relative"
    fit_threshold: bool = True              # fit the child's word threshold on its training items (False: scale 1)
    check: CheckSet | None = None           # other gold items scored before and after (the parent's world)
    replay: str | None = "auto"             # the parent's own world mixed in: a file, "demo", None, or "auto"
                                            # ("demo" when the parent is the bundled demo model, else None)
    replay_items: int = 400
    keep_parent: float = 1.0                # weight of parent_loss on the replayed items (0: labels alone)
    balanced_shares: bool = False           # share_loss with wrong and correct words as equal halves
    augment: bool = False                   # with "visual": new brightness, contrast and mirroring each step
    progress: bool = True
    on_progress: Callable[[dict], None] | None = None
    should_stop: Callable[[], bool] | None = None

    def report_progress(self, event: dict) -> None:
        if self.on_progress is not None:
            self.on_progress(event)

    def check_parts(self) -> None:
        """FinetuneError when what is to train cannot be."""
        if self.train not in TRAIN_PARTS:
            raise FinetuneError(f"--train must be one of {', '.join(TRAIN_PARTS)}, not {self.train!r}")
        if self.augment and self.train != "visual":
            raise FinetuneError("--augment changes images, so it needs --train visual")


@dataclass
class CheckSet:
    """Gold items scored before and after fine-tuning, to see what the child forgets:
    a CapTokenEval file's (`from_file`) or a store dataset's."""
    source: dict            # {"file": name} or {"dataset": name}, as the report names it
    items: list[dict]
    base_dir: Path          # where the items' relative image paths start

    @classmethod
    def from_file(cls, path: Path) -> "CheckSet":
        path = Path(path)
        return cls({"file": path.name}, read_json_lines(path), path.parent)
