"""`capscope train demo`: the bundled demo model in one command.

1. `train clip` into WORK/demo_clip.pt (the tiny CLIP, from scratch);
2. `train infometic` on it (frozen) from demo scenes into WORK/demo_infometic.pt;
3. the result, fp16, to the packaged `metrics/demo_model/demo_infometic.pt`
   (or --out).
Both stages checkpoint and resume (`--resume`); budgets are in minutes, so a
faster machine takes more steps in the same time.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from capscope.metrics.loading import demo_model_path, read_checkpoint
from capscope.train.clip import ClipTrainConfig, state_path as clip_state, train_clip
from capscope.train.infometic_setup import InfoTrainConfig, state_path as head_state
from capscope.train.infometic_trainer import train_infometic

log = logging.getLogger(__name__)


def train_demo(args) -> Path:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    clip_out, head_out = work / "demo_clip.pt", work / "demo_infometic.pt"
    train_clip(ClipTrainConfig(
        out=clip_out, minutes=args.clip_minutes, seed=args.seed, device=args.device, threads=args.threads,
        resume=args.resume and clip_state(clip_out).is_file(),
    ))
    train_infometic(InfoTrainConfig(
        out=head_out, clip=clip_out, minutes=args.head_minutes, seed=args.seed, device=args.device,
        threads=args.threads, resume=args.resume and head_state(head_out).is_file(), half=True,
    ))
    final = Path(args.out) if args.out else demo_model_path()
    final.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(head_out, final)
    size_mb = final.stat().st_size / 2**20
    log.info("demo model written to %s (%.1f MB)", final, size_mb)
    read_checkpoint(final, "demo model")  # readable as saved
    return final
