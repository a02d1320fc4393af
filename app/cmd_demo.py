"""Demo world commands: `demo-data` and `train clip` (CONTRACTS §4)."""
from __future__ import annotations

from pathlib import Path

from capscope.cli import CapscopeError


def register(sub) -> None:
    data = sub.add_parser("demo-data", help="write synthetic scenes with gold labels and a training file")
    data.add_argument("--out", required=True, type=Path, help="output folder")
    data.add_argument("--n", type=int, default=500, help="number of scenes (each gives a clean and a polluted caption)")
    data.add_argument("--seed", type=int, default=0)
    data.set_defaults(func=run_demo_data)

    train = sub.add_parser("train", help="train capscope's own models")
    targets = train.add_subparsers(dest="target", required=True, metavar="TARGET")
    clip = targets.add_parser("clip", help="a tiny open_clip model from scratch on demo scenes")
    clip.add_argument("--out", required=True, type=Path, help="checkpoint file (open_clip state dict)")
    clip.add_argument("--minutes", type=float, default=None, help="training time budget (default 15 unless --steps)")
    clip.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    clip.add_argument("--seed", type=int, default=0)
    clip.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    clip.add_argument("--resume", action="store_true", help="continue from OUT's training state")
    clip.add_argument("--batch-scenes", type=int, default=48, help="fresh scenes drawn per step")
    clip.add_argument("--lr", type=float, default=5e-4)
    clip.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    clip.add_argument("--checkpoint-minutes", type=float, default=5.0)
    clip.add_argument("--probe-scenes", type=int, default=150, help="held-out scenes for the probe figures")
    clip.set_defaults(func=run_train_clip)


def run_demo_data(args) -> int:
    from capscope.demo.dataset import write_demo_data

    if args.n < 1:
        raise CapscopeError("--n must be at least 1")
    counts = write_demo_data(args.out, args.n, args.seed)
    print(f"wrote {counts['scenes']} scenes, {counts['gold_items']} gold items to "
          f"{args.out / 'captokeneval.jsonl'}, {counts['training_rows']} training rows to {args.out / 'train.jsonl'}")
    return 0


def run_train_clip(args) -> int:
    from capscope.demo.train_clip import ClipTrainConfig, train_clip

    if args.minutes is None and args.steps is None:
        args.minutes = 15.0
    if args.resume and not args.out.exists():
        raise CapscopeError(f"--resume: no checkpoint at {args.out}")
    config = ClipTrainConfig(
        out=args.out, minutes=args.minutes, steps=args.steps, seed=args.seed, device=args.device,
        resume=args.resume, batch_scenes=args.batch_scenes, lr=args.lr, threads=args.threads,
        checkpoint_minutes=args.checkpoint_minutes, probe_scenes=args.probe_scenes,
    )
    train_clip(config)
    return 0
