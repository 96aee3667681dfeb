"""Subcommand groups of rlhf-studio, one module each (see labeler/cli.py), and what they share."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import sqlite_utils

from storage import open_db


@contextlib.contextmanager
def database(path: str | Path, **options) -> Iterator[sqlite_utils.Database]:
    """`with database(args.db) as db:` open_db's connection (`options`: open_db's), closed when the block ends,
    also on an error."""
    db = open_db(path, **options)
    try:
        yield db
    finally:
        db.conn.close()
