"""`capscope correlate`: agreement of the metrics with people on a public
human-judgement benchmark, the papers' published numbers beside."""
from __future__ import annotations

import json
import logging
import sys
from contextlib import contextmanager
from pathlib import Path

from capscope.bench.human import BENCHMARKS
from capscope.batch.command_scorer import build_scorer
from capscope.commands.options import METRICS, add_engine_options, engine_cluster
from capscope.metrics.config import ScorerConfig, add_flags
from capscope.common.errors import CapscopeError

log = logging.getLogger("capscope")


def register(sub) -> None:
    cmd = sub.add_parser("correlate", help="compare the metrics' scores with human judgements (Kendall tau, "
                                           "accuracy, Pearson) beside the papers' published numbers")
    cmd.add_argument("--benchmark", required=True, choices=BENCHMARKS)
    cmd.add_argument("--data", type=Path, default=None,
                     help="the benchmark's files (a folder or the file itself; docs/human-judgements.md gives each layout)")
    cmd.add_argument("--metric", nargs="+", action="extend", choices=METRICS, dest="metrics",
                     help="one or more metrics (default infometic)")
    cmd.add_argument("--json", action="store_true", help="print one JSON object")
    cmd.add_argument("--bootstrap", type=int, default=1000, help="bootstrap draws for the 95%% interval (0: none)")
    cmd.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of reference draws")
    cmd.add_argument("--plot", type=Path, default=None, help="write the score-vs-human figure to this PNG")
    cmd.add_argument("--batch-size", type=int, default=32)
    add_flags(cmd, defaults={"long_captions": "cut"})  # the published tables were made by code that cuts
    add_engine_options(cmd)
    cmd.set_defaults(func=run_correlate)


def load_benchmark(args):
    from capscope.bench import human

    if args.data is None:
        raise CapscopeError(human.missing_data_hint(args.benchmark))
    if not args.data.exists():
        raise CapscopeError(f"--data: {args.data} not found; {human.missing_data_hint(args.benchmark)}")
    try:
        return human.load(args.benchmark, args.data, seed=args.seed)
    except ValueError as err:
        raise CapscopeError(str(err)) from None


def run_correlate(args) -> int:
    from capscope.bench.human_correlation import correlate
    from capscope.bench.correlation_report import format_result

    if args.bootstrap < 0:
        raise CapscopeError("--bootstrap must be 0 or more")
    if args.batch_size < 1:
        raise CapscopeError("--batch-size must be at least 1")
    loaded = load_benchmark(args)
    if not loaded.rows:
        raise CapscopeError(f"no usable rows in {args.data} ({len(loaded.problems)} problems, e.g. "
                            f"{loaded.problems[0] if loaded.problems else 'empty file'})")
    metrics = args.metrics or ["infometic"]
    with scoring_engine(args, ScorerConfig.from_args(args, metrics)) as (scorer, batch_size):
        outcome = correlate(loaded, scorer, metrics, batch_size=batch_size, bootstrap=args.bootstrap,
                            seed=args.seed, token_rule=args.token_rule, beta=args.beta, progress=not args.json)
    report_problems(outcome.problems)
    if args.plot is not None and outcome.points:
        from capscope.bench.plot import correlation_plot

        correlation_plot(outcome.result, outcome.points, args.plot)
        log.info("figure written to %s", args.plot)
    print(json.dumps(outcome.result, ensure_ascii=False) if args.json else format_result(outcome.result))
    return 0


@contextmanager
def scoring_engine(args, options: ScorerConfig):
    """(something with the Scorer's score_batch, the batch size to hand it): a
    Scorer here, or a pool of Ray workers fed batches of one slice per worker
    (their actors end with the block)."""
    cluster = engine_cluster(args)
    if cluster is None:
        yield build_scorer(options), args.batch_size
        return
    from capscope.batch.engine_ray import ScorerPool

    pool = ScorerPool(options, cluster)
    try:
        yield pool, args.batch_size * pool.workers
    finally:
        pool.close()


def report_problems(problems: list[str], shown: int = 5) -> None:
    if not problems:
        return
    print(f"capscope correlate: {len(problems)} rows skipped:", file=sys.stderr)
    for problem in problems[:shown]:
        print(f"  {problem}", file=sys.stderr)
    if len(problems) > shown:
        print(f"  ... and {len(problems) - shown} more", file=sys.stderr)
