"""`capscope score` and `capscope features`."""
from __future__ import annotations

import logging
from pathlib import Path

from capscope.batch import inputs, pipeline
from capscope.commands.options import METRICS, add_engine_options, engine_cluster
from capscope.common.errors import CapscopeError
from capscope.metrics.config import ScorerConfig, add_flags

log = logging.getLogger(__name__)


def register(sub) -> None:
    score = sub.add_parser("score", help="score a JSONL file of image-caption pairs")
    score.add_argument("--input", required=True, type=Path)
    score.add_argument("--output", required=True, type=Path)
    score.add_argument("--metric", nargs="+", action="extend", choices=METRICS, dest="metrics",
                       help="one or more metrics (default infometic)")
    score.add_argument("--batch-size", type=int, default=32)
    score.add_argument("--retry-errors", action="store_true",
                       help="resuming: score again the rows saved with an error (each id stays once in --output)")
    add_input_format_options(score)
    add_flags(score)
    add_engine_options(score)
    score.set_defaults(func=run_score)

    features = sub.add_parser("features", help="write official-format InfoMetIC image features (.npz) for a JSONL of images")
    features.add_argument("--input", required=True, type=Path)
    features.add_argument("--out", required=True, type=Path)
    add_flags(features, hide_scoring=True)  # it judges no caption; the flags stay accepted
    add_engine_options(features)
    features.set_defaults(func=run_features)


def add_input_format_options(parser) -> None:
    parser.add_argument("--input-format", default="auto", choices=["auto", "coco-results", "pairs"],
                        help="the layout of --input (auto: recognised from its content; docs/formats.md §11)")
    parser.add_argument("--annotations", type=Path, default=None,
                        help="with a COCO results input: the COCO captions annotations file (image files, references)")
    parser.add_argument("--images", type=Path, default=None, help="with a COCO results input: the folder of its images")


def pairs_input(args) -> Path:
    """The pairs file to score: --input itself, or the pairs of a COCO results
    file written beside --output (OUTPUT_STEM-pairs.jsonl)."""
    # scored rows are pairs too; a bad first line of a pairs file stays that line's error row, as always
    if inputs.input_layout(args.input, args.input_format, otherwise="pairs") != "coco-results":
        return args.input
    pairs = args.output.with_name(args.output.stem + "-pairs.jsonl")
    coco = inputs.CocoCaptions(args.annotations) if args.annotations else None
    n = inputs.write_coco_pairs(args.input, coco, args.images, pairs)
    log.info("%d COCO results written as pairs to %s", n, pairs)
    return pairs


def run_score(args) -> int:
    if args.batch_size < 1:
        raise CapscopeError("--batch-size must be at least 1")
    cluster = engine_cluster(args)
    options = ScorerConfig.from_args(args, args.metrics or ["infometic"])
    pipeline.score_file(options, pairs_input(args), args.output, args.batch_size, args.retry_errors, cluster)
    return 0


def run_features(args) -> int:
    cluster = engine_cluster(args)
    options = ScorerConfig.from_args(args, ["infometic"] if args.infometic_checkpoint else ["infoclip"])
    written, failed = pipeline.features_file(options, args.input, args.out, cluster)
    return 0 if written or not failed else 1
