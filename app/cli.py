"""The `capscope` command. Each subcommand lives in its own module with
`register(subparsers)`; heavy imports (torch, gradio) happen inside the
command, so `capscope --help` stays instant."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

# module (inside capscope) -> it registers one or more subcommands
COMMAND_MODULES = [
    "capscope.cmd_score",      # score, features, models
    "capscope.cmd_demo",       # demo-data, train, evaluate
    "capscope.cmd_bench",      # bench
    "capscope.cmd_annotate",   # import, export, users, serve
]


class CapscopeError(Exception):
    """An error the user can fix; printed as one line, no traceback."""


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
    except CapscopeError as err:
        print(f"capscope {args.command}: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # model-availability errors come from metrics/ as ModelUnavailable
        if type(err).__name__ == "ModelUnavailable":
            print(f"capscope {args.command}: error: {err}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
