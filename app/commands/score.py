"""`capscope score` and `capscope features`."""
from __future__ import annotations

from pathlib import Path

from capscope.batch import pipeline
from capscope.batch.pipeline import ScorerOptions
from capscope.commands.options import METRICS, add_engine_options, add_model_options, add_region_options, engine_cluster
from capscope.metrics.errors import CapscopeError


def register(sub) -> None:
    score = sub.add_parser("score", help="score a JSONL file of image-caption pairs")
    score.add_argument("--input", required=True, type=Path)
    score.add_argument("--output", required=True, type=Path)
    score.add_argument("--metric", nargs="+", action="extend", choices=METRICS, dest="metrics",
                       help="one or more metrics (default infometic)")
    score.add_argument("--batch-size", type=int, default=32)
    score.add_argument("--retry-errors", action="store_true",
                       help="resuming: score again the rows saved with an error (each id stays once in --output)")
    add_region_options(score)
    add_model_options(score)
    add_engine_options(score)
    score.set_defaults(func=run_score)

    features = sub.add_parser("features", help="write official-format InfoMetIC image features (.npz) for a JSONL of images")
    features.add_argument("--input", required=True, type=Path)
    features.add_argument("--out", required=True, type=Path)
    add_region_options(features)
    add_model_options(features)
    add_engine_options(features)
    features.set_defaults(func=run_features)


def run_score(args) -> int:
    if args.batch_size < 1:
        raise CapscopeError("--batch-size must be at least 1")
    cluster = engine_cluster(args)
    options = ScorerOptions.from_args(args, args.metrics or ["infometic"])
    pipeline.score_file(options, args.input, args.output, args.batch_size, args.retry_errors, cluster)
    return 0


def run_features(args) -> int:
    cluster = engine_cluster(args)
    options = ScorerOptions.from_args(args, ["infometic"] if args.infometic_checkpoint else ["infoclip"])
    written, failed = pipeline.features_file(options, args.input, args.out, cluster)
    return 0 if written or not failed else 1
