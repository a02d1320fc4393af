"""`capscope diagnose`: what captioning models get wrong, and is one better (docs/formats.md §12)."""
from __future__ import annotations

from pathlib import Path

from capscope.batch.inputs import FORMATS
from capscope.commands.options import METRICS, add_engine_options, engine_cluster
from capscope.metrics.config import ScorerConfig, add_flags
from capscope.common.errors import CapscopeError


def register(sub) -> None:
    cmd = sub.add_parser("diagnose", help="what captioning models get wrong, and is one better: a summary and a report")
    cmd.add_argument("--model", action="append", required=True, metavar="NAME=FILE", dest="models",
                     help="a model's captions: a COCO results JSON (with --annotations and --images), capscope "
                          "JSONL pairs, or rows capscope score wrote (repeat for each model)")
    cmd.add_argument("--annotations", type=Path, default=None,
                     help="a COCO captions annotations file: each image's file name and its reference captions")
    cmd.add_argument("--images", type=Path, default=None, help="the folder the annotations' file names are in")
    cmd.add_argument("--input-format", default="auto", choices=["auto", *FORMATS],
                     help="the layout of every --model file (auto: recognised from its content)")
    cmd.add_argument("--metric", nargs="+", action="extend", choices=METRICS, dest="metrics",
                     help="metrics to score and summarise (default infometic clip-s; rows already scored keep theirs)")
    cmd.add_argument("--out", required=True, type=Path, help="the folder for summary.json, index.html, figures and scored rows")
    cmd.add_argument("--bootstrap", type=int, default=1000, help="bootstrap draws for the 95%% intervals")
    cmd.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    cmd.add_argument("--batch-size", type=int, default=32)
    add_flags(cmd)
    add_engine_options(cmd)
    cmd.set_defaults(func=run_diagnose)


def run_diagnose(args) -> int:
    from capscope.diagnose.run import diagnose, parse_model

    if args.batch_size < 1 or args.bootstrap < 0:
        raise CapscopeError("--batch-size must be at least 1 and --bootstrap at least 0")
    models = [parse_model(text) for text in args.models]
    for model in models:
        if not model.path.is_file():
            raise CapscopeError(f"--model {model.name}: {model.path}: no such file")
    metrics = args.metrics or ["infometic", "clip-s"]
    summary = diagnose(models, args.out, ScorerConfig.from_args(args, metrics), metrics=args.metrics,
                       input_format=args.input_format, annotations=args.annotations, images=args.images,
                       batch_size=args.batch_size, cluster=engine_cluster(args), seed=args.seed, draws=args.bootstrap)
    for name, model in summary.models.items():
        print(f"{name}: {model.n_captions} captions on {model.n_images} images, {model.n_errors} not scored")
    print(f"summary: {args.out / 'summary.json'}\nreport: {args.out / 'index.html'}")
    return 0
