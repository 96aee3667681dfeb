"""rlhf-studio: parse, call a service, print.

Each group of subcommands lives in labeler/commands/<group>.py with a `register(subparsers, common)`
function; `common` is the parent parser that gives every subcommand --db and --project.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from labeler.services.errors import InputError, PermissionDenied

DEFAULT_DB = "data/studio.db"
COMMAND_MODULES = [
    "labeler.commands.serve",
    "labeler.commands.data",
    "labeler.commands.users",
    "labeler.commands.generate",
    "labeler.commands.train",
    "labeler.commands.chat",
    "labeler.commands.eval",
]


def common_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=DEFAULT_DB, help=f"SQLite database file (default: {DEFAULT_DB})")
    common.add_argument("--project", default="default", help="project name (default: the default project)")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlhf-studio",
        description="Rate and rank model answers, export preference datasets, train (SFT, RM, DPO, PPO) and chat.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_parser()
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name == module_name:  # a command group not written yet
                continue
            raise
        module.register(subparsers, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except (InputError, PermissionDenied, FileNotFoundError) as error:
        # Bad input gets one line on stderr, never a traceback.
        print(f"rlhf-studio {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
