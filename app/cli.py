"""The `capscope` command. Each subcommand lives in its own module with
`register(subparsers)`; heavy imports (torch, gradio) happen inside the
command, so `capscope --help` stays instant."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from capscope.common.errors import CapscopeError

# module (inside capscope) -> it registers one or more subcommands
COMMAND_MODULES = [
    "capscope.commands.score",      # score, features
    "capscope.commands.weights",     # models
    "capscope.commands.demo",       # demo-data, train, evaluate
    "capscope.commands.bench",      # bench
    "capscope.commands.annotation_store",   # import, export, users, agreement, gold, queue
    "capscope.commands.serve",      # serve
    "capscope.commands.correlate",  # correlate
    "capscope.commands.diagnose",   # diagnose
]


class CapscopeParser(argparse.ArgumentParser):
    """An argument parser whose --help gives every option's default. Every
    command's parser is one: subparsers are made of their parent's class."""

    def format_help(self) -> str:
        for action in self._actions:
            default = action.default
            if not action.option_strings or default in (None, False, argparse.SUPPRESS) or default == []:
                continue
            if action.help != argparse.SUPPRESS and "default" not in (action.help or "").lower():
                action.help = f"{action.help} (default: %(default)s)" if action.help else "default: %(default)s"
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = CapscopeParser(prog="capscope", description="Token- and region-level caption evaluation.")
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


# what a user does after Ctrl-C, for the commands that pick up where they stopped
RESUME_HINTS = {
    "score": "; the rows written so far are kept: run the same command again to score the rest",
    "diagnose": "; the scored rows so far are kept: run the same command again to go on",
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(  # other packages' INFO lines (open_clip's "Loading config ...") only with --verbose
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("capscope").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        from capscope.commands.options import run_command

        return run_command(args)
    except CapscopeError as err:  # every layer's user errors (ModelUnavailable, AnnotationError, ...)
        print(f"capscope {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"capscope {args.command}: interrupted{RESUME_HINTS.get(args.command, '')}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
