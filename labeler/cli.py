"""rlhf-studio: parse, call a service, print.

Each group of subcommands lives in labeler/commands/<group>.py with a `register(subparsers, common)`
function; `common` is the parent parser that gives every subcommand --db and --project.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sqlite3
import sys
from importlib.metadata import PackageNotFoundError, version

from labeler.errors import InputError, PermissionDenied
from storage import StorageError, creation

DEFAULT_DB = "data/studio.db"
DB_ENV = "RLHF_STUDIO_DB"
# Commands that may create the database when --db names no file yet; every other one needs --create-db,
# so a mistyped --db fails with one line instead of quietly filling a new, empty database.
CREATING_COMMANDS = {"serve", "demo"}
COMMAND_MODULES = [
    "labeler.commands.serve",
    "labeler.commands.data",
    "labeler.commands.users",
    "labeler.commands.generate",
    "labeler.commands.train",
    "labeler.commands.chat",
    "labeler.commands.eval",
    "labeler.commands.questions",
]


def _version() -> str:
    try:
        return version("rlhf-studio")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def common_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=os.environ.get(DB_ENV, DEFAULT_DB),
                        help=f"SQLite database file (default: ${DB_ENV} or {DEFAULT_DB})")
    common.add_argument("--project", default="default", help="project name (default: the default project)")
    common.add_argument(
        "--create-db", action="store_true",
        help="create the --db file if it does not exist (serve and demo always may)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlhf-studio",
        description="Rate and rank model answers, export preference datasets, train (SFT, RM, DPO, PPO) and chat.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_parser()
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        module.register(subparsers, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    may_create = args.command in CREATING_COMMANDS or getattr(args, "create_db", False)
    try:
        with creation(may_create):
            result = args.func(args)
    except (InputError, PermissionDenied, FileNotFoundError, StorageError) as error:
        # Bad input gets one line on stderr, never a traceback.
        print(f"rlhf-studio {args.command}: error: {error}", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as error:
        # A database that opened but fails later (read-only, corrupt): still one line, naming the file.
        print(f"rlhf-studio {args.command}: error: {getattr(args, 'db', '')}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `rlhf-studio runs show 1 | head`: the reader left early, which is no error. Point stdout at /dev/null so
        # Python's flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
