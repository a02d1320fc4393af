"""`capscope train infometic --labels FILE | --dataset NAME --init ...`: fine-tuning
a checkpoint on the team's labels, from the command line (the parser is demo.py's
`register_train_infometic`; the run is capscope.train.finetune)."""
from __future__ import annotations

from pathlib import Path

from capscope.common.errors import CapscopeError
from capscope.train.finetune.defaults import MINUTES as FINETUNE_MINUTES


# options left unset fall back to FinetuneConfig's defaults (one place for them)
FINETUNE_TUNABLES = ("swaps", "visual_blocks", "replay_items", "anchor", "keep_parent", "lr", "balanced_shares",
                     "augment")


def _given(args, names: tuple[str, ...]) -> dict:
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def run_finetune(args) -> int:
    import json

    from capscope.train.finetune import FinetuneConfig, FinetuneError, finetune, format_report

    if (args.labels is None) == (args.dataset is None):
        raise CapscopeError("give one of --labels FILE or --dataset NAME")
    if args.init is None:
        raise CapscopeError("--init: the checkpoint to fine-tune (a file, or `demo` for the bundled model)")
    items, base_dir, labels = labels_for(args)
    if args.minutes is None and args.steps is None:
        args.minutes = FINETUNE_MINUTES
    config = FinetuneConfig(
        out=args.out, init=init_checkpoint(args.init), items=items, base_dir=base_dir, labels=labels,
        holdout=args.holdout, minutes=args.minutes, steps=args.steps, seed=args.seed, device=args.device,
        threads=args.threads, token_rule=args.token_rule, check=check_set(args.check_gold), progress=not args.json,
        train=args.train, replay=args.replay, fit_threshold=not args.no_fit_threshold,
        **_given(args, FINETUNE_TUNABLES),
    )
    try:
        report = finetune(config)
    except FinetuneError as err:
        raise CapscopeError(str(err)) from None
    print(json.dumps(report) if args.json else format_report(report, args.out))
    return 0


def init_checkpoint(value: str) -> Path:
    from capscope.metrics.loading import demo_model_path

    path = demo_model_path() if value == "demo" else Path(value)
    if not path.is_file():
        raise CapscopeError(f"--init: no checkpoint at {path}")
    return path


def check_set(path: Path | None):
    """The --check-gold file's items, read before any training (a bad file fails at once)."""
    from capscope.common.jsonl import JsonlError
    from capscope.train.finetune import CheckSet

    if path is None:
        return None
    if not path.is_file():
        raise CapscopeError(f"--check-gold: no file at {path}")
    try:
        return CheckSet.from_file(path)
    except JsonlError as err:
        raise CapscopeError(f"--check-gold: {err}") from None


def labels_for(args) -> tuple[list[dict], Path, dict]:
    """(CapTokenEval items, folder their image paths start from, what the labels are)."""
    from capscope.common.checksums import file_sha256
    from capscope.common.jsonl import JsonlError, read_json_lines
    from capscope.train.finetune import items_sha256

    if args.labels is not None:
        if not args.labels.is_file():
            raise CapscopeError(f"--labels: no file at {args.labels}")
        try:
            items = read_json_lines(args.labels)
        except JsonlError as err:
            raise CapscopeError(f"--labels: {err}") from None
        return items, args.labels.parent, {"source": "file", "file": args.labels.name,
                                           "sha256": file_sha256(args.labels)}
    from capscope.annotation.export import captokeneval_items
    from capscope.commands.options import open_store

    items = captokeneval_items(open_store(args), args.dataset)
    if not items:
        raise CapscopeError(f"--dataset: no items in dataset {args.dataset!r}")
    return items, Path("."), {"source": "dataset", "dataset": args.dataset, "sha256": items_sha256(items)}
