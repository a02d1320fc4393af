"""The `capscope` command. Each subcommand lives in its own module with
`register(subparsers)`; heavy imports (torch, gradio) happen inside the
command, so `capscope --help` stays instant."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from capscope.metrics.errors import CapscopeError

# module (inside capscope) -> it registers one or more subcommands
COMMAND_MODULES = [
    "capscope.cmd_score",      # score, features
    "capscope.cmd_models",     # models
    "capscope.cmd_demo",       # demo-data, train, evaluate
    "capscope.cmd_bench",      # bench
    "capscope.cmd_annotate",   # import, export, users, serve
    "capscope.cmd_correlate",  # correlate
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capscope", description="Token- and region-level caption evaluation.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except CapscopeError as err:  # every layer's user errors (ModelUnavailable, AnnotationError, ...)
        print(f"capscope {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
