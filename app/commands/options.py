"""The flags that several commands share (the engine and database options)
and `open_store`; the Scorer's flags come from `capscope.metrics.config.add_flags`."""
from __future__ import annotations

import argparse

from capscope.common.errors import CapscopeError
from capscope.metrics.registry import METRIC_NAMES

METRICS = METRIC_NAMES  # live: a metric registered later is a valid choice


ENGINES = ("local", "ray")


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Where the scoring runs: here, or on the workers of a Ray cluster."""
    parser.add_argument("--engine", default="local", choices=ENGINES,
                        help="local: this process; ray: the actors of a Ray cluster, one Scorer each "
                             '(pip install -e ".[ray]")')
    parser.add_argument("--address", default=None,
                        help="with --engine ray: the cluster (auto, HOST:PORT, ray://HOST:PORT); default: RAY_ADDRESS, "
                             "else the cluster started on this machine, else a new local one")
    parser.add_argument("--workers", type=int, default=None,
                        help="with --engine ray: how many workers (default: one per GPU, else half the CPUs)")
    parser.add_argument("--gpus-per-worker", type=float, default=None,
                        help="with --engine ray: GPUs each worker holds (default 1 where the cluster has GPUs)")


def engine_cluster(args):
    """None for a local run, else where and how wide the Ray run is; bad combinations in one line."""
    ray_only = {"--address": args.address, "--workers": args.workers, "--gpus-per-worker": args.gpus_per_worker}
    if args.engine == "local":
        given = [flag for flag, value in ray_only.items() if value is not None]
        if given:
            raise CapscopeError(f"{given[0]} goes with --engine ray")
        return None
    if args.workers is not None and args.workers < 1:
        raise CapscopeError("--workers must be at least 1")
    if args.gpus_per_worker is not None and args.gpus_per_worker < 0:
        raise CapscopeError("--gpus-per-worker must be 0 or more")
    from capscope.batch.engine_ray import Cluster

    return Cluster(args.address, args.workers, args.gpus_per_worker, args.device)


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, metavar="URL",
                        help="SQLAlchemy database URL (default: $CAPSCOPE_DB_URL or an SQLite file in the data folder)")


def open_store(args):
    from sqlalchemy.exc import ArgumentError, OperationalError

    from capscope.db import Store

    try:
        return Store(args.db)
    except ArgumentError as err:
        raise CapscopeError(f"bad database URL: {err}") from None
    except OperationalError as err:
        raise CapscopeError(f"cannot open the database: {err.orig}") from None


def run_command(args) -> int:
    """Run the parsed command; what it changes goes on the audit log as done by the command line
    (`capscope serve` says who acts request by request)."""
    if args.command == "serve":
        return int(args.func(args) or 0)
    from capscope.annotation.audit import acting_as

    with acting_as(command_line_user()):
        return int(args.func(args) or 0)


def command_line_user() -> str:
    import getpass

    try:
        return f"command line ({getpass.getuser()})"
    except (KeyError, OSError):  # no name for this process's user id (a container)
        return "command line"
