"""Opening the database, the one way: WAL, busy timeout, foreign keys, migrations applied.

A connection is cheap; open one per request or thread (`open_db`) and never share one
across Gradio's worker threads. Every write goes through `write_transaction`, which starts
with BEGIN IMMEDIATE so that a read-then-write never fails half-way with "database is locked".
"""
from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Iterator

import sqlite_utils

from storage.migrations import MIGRATIONS

BUSY_TIMEOUT_MS = 30_000


def connect(path: str | Path) -> sqlite3.Connection:
    """A raw sqlite3 connection configured the project's way (no migrations)."""
    path = str(path)
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: we issue BEGIN ourselves, so Python never opens a deferred one behind our back.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def open_db(path: str | Path) -> sqlite_utils.Database:
    """Open (and create or migrate) the studio database at `path`."""
    db = sqlite_utils.Database(connect(path))
    migrate(db)
    return db


@contextlib.contextmanager
def write_transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception. Not re-entrant."""
    conn = db.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def schema_version(db: sqlite_utils.Database) -> int:
    if "schema_version" not in db.table_names():
        return 0
    row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return row[0] or 0


def migrate(db: sqlite_utils.Database) -> int:
    """Apply every forward migration newer than the stored version, each in its own transaction."""
    with write_transaction(db):
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT (datetime('now')))"
        )
    current = schema_version(db)
    for version, (name, statements) in enumerate(MIGRATIONS, start=1):
        if version <= current:
            continue
        with write_transaction(db):
            # Re-check inside the lock: another process may have migrated meanwhile.
            if schema_version(db) >= version:
                continue
            for statement in statements:
                db.execute(statement)
            db.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)", [version, name])
    return schema_version(db)


def backup(db: sqlite_utils.Database, out: str | Path) -> Path:
    """A consistent copy of a live database through SQLite's backup API (never a file copy)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        out.unlink()
    target = sqlite3.connect(str(out))
    try:
        db.conn.backup(target)
    finally:
        target.close()
    return out
