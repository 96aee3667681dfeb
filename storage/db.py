"""Opening the database, the one way: WAL, busy timeout, foreign keys, migrations applied.

A connection is cheap (~0.4 ms of CPU to open); open one per request or thread (`open_db`), or take one
from a `ConnectionPool` for the length of a request, and never use one from two threads at once. Every write goes
through `write_transaction`, which starts with BEGIN IMMEDIATE so that a read-then-write never fails half-way with
"database is locked".

Migrations run once when a process starts (`rlhf-studio serve`, a CLI command, the training worker);
the web app's per-request connections open with `migrate=False`: one read of the schema version, never
the write lock another process holds (an import, a backup; under WAL, readers never wait for a writer),
and a clear StorageError instead of an obscure SQL error when the database is older than this code.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import sqlite3
import tempfile
import threading
from pathlib import Path
from typing import Iterable, Iterator

import sqlite_utils

from storage.migrations import MIGRATIONS

BUSY_TIMEOUT_MS = 30_000

# Whether open_db may create a missing database file. The CLI turns it off for every command but
# `serve` (unless --create-db), so a mistyped --db fails instead of starting a new, empty database.
# A context variable, not a module global: set for one call tree, reset by the `creation` context manager.
_CREATION_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("rlhf_studio_db_creation", default=True)


class StorageError(Exception):
    """The database file cannot be used: missing, not an SQLite database, or not readable/writable."""


@contextlib.contextmanager
def creation(allowed: bool) -> Iterator[None]:
    """`with creation(False):` open_db refuses to create a database file that does not exist yet."""
    token = _CREATION_ALLOWED.set(allowed)
    try:
        yield
    finally:
        _CREATION_ALLOWED.reset(token)


def connect(path: str | Path, *, create: bool | None = None, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """A raw sqlite3 connection configured the project's way (no migrations).

    create=None follows `creation(...)` (default: allowed). StorageError, naming the file, when it is
    missing and may not be created, is not a database, or its folder is not writable.
    """
    path = str(path)
    if create is None:
        create = _CREATION_ALLOWED.get()
    if path != ":memory:":
        if not Path(path).exists():
            if not create:
                raise StorageError(
                    f"{path}: no such database (a typo in --db?); `rlhf-studio serve --db {path}` creates one,"
                    " or add --create-db"
                )
            _create_private(Path(path))
        elif Path(path).is_dir():
            raise StorageError(f"{path}: is a folder, not a database file")
    try:
        # isolation_level=None: we issue BEGIN ourselves, so Python never opens a deferred one behind our back.
        conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as error:
        raise StorageError(_explain(path, error)) from None
    return conn


# The database holds password hashes and every label: created readable by its owner only. SQLite creates the
# -wal and -shm files with the database file's permissions, so they are private too.
PRIVATE_FILE, PRIVATE_FOLDER = 0o600, 0o700


def _create_private(path: Path) -> None:
    """An empty database file, mode 0600 (its folder, when created here, 0700), before SQLite opens it."""
    try:
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=PRIVATE_FOLDER, exist_ok=True)
        elif not path.parent.is_dir():
            raise NotADirectoryError(20, "Not a directory")
    except OSError as error:
        raise StorageError(f"{path}: cannot create the database's folder ({error.strerror})") from None
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE))
    except FileExistsError:
        pass  # created meanwhile by another process: it chose the mode
    except OSError as error:
        raise StorageError(f"{path}: cannot create the database ({error.strerror})") from None


def make_private(path: str | Path) -> None:
    """Take group and other permissions off an existing database and its -wal/-shm files (a database created
    before files were made private), when this user owns them; anything else is left as it is."""
    for name in (str(path), f"{path}-wal", f"{path}-shm"):
        with contextlib.suppress(OSError):
            info = os.stat(name)
            if info.st_uid == os.getuid() and info.st_mode & 0o077:
                os.chmod(name, info.st_mode & 0o700)


class DiskFull(StorageError):
    """A write failed because the disk (or the database's size limit) is full; the transaction was rolled back."""

    def __init__(self):
        super().__init__("the disk is full; nothing was saved (free some space on the server, then try again)")


def is_disk_full(error: BaseException) -> bool:
    """SQLITE_FULL ("database or disk is full"), whatever statement hit it."""
    return isinstance(error, sqlite3.OperationalError) and (
        getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(error))


def _explain(path: str, error: sqlite3.DatabaseError) -> str:
    message = str(error)
    if "not a database" in message:
        return f"{path}: not an SQLite database ({message})"
    if "unable to open" in message or "readonly" in message or "read-only" in message:
        return f"{path}: cannot open the database for writing ({message}); is the file or its folder read-only?"
    return f"{path}: {message}"


def open_db(
    path: str | Path,
    *,
    migrate: bool = True,
    create: bool | None = None,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
) -> sqlite_utils.Database:
    """Open the studio database at `path`, creating it (see `connect`) and applying pending migrations.

    migrate=False is for per-request connections of a server that migrated at start-up: a request is
    never the one that migrates, and a database older than this code (replaced by an old backup while
    the server ran, or never migrated) is a StorageError naming the versions and the fix.
    """
    may_create = _CREATION_ALLOWED.get() if create is None else create
    if migrate and not may_create and str(path) != ":memory:" and Path(path).is_file() and Path(path).stat().st_size == 0:
        # SQLite takes an empty file for a new database and migrating would make it one: the same typo (or a
        # `touch`) that a missing file is refused for. Without migrating, the schema check refuses it.
        raise StorageError(f"{path}: an empty file, not a database (a typo in --db?); add --create-db to make it one")
    conn = connect(path, create=create, busy_timeout_ms=busy_timeout_ms)
    db = sqlite_utils.Database(conn)
    try:
        if migrate:
            if str(path) != ":memory:":
                make_private(path)  # once per process start (serve, a CLI command, a worker), not per request
            _apply_migrations(db)  # the module function; `migrate` here is the flag
        else:
            _require_current(db, str(path))
    except sqlite3.DatabaseError as error:
        conn.close()
        raise StorageError(_explain(str(path), error)) from None
    except StorageError:
        conn.close()
        raise
    return db


def _require_current(db: sqlite_utils.Database, path: str) -> None:
    """StorageError unless the schema is at least this code's version (one indexed read, no lock)."""
    try:
        version = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
    except sqlite3.OperationalError as error:
        if "no such table" not in str(error):
            raise
        version = 0
    if version < len(MIGRATIONS):
        raise StorageError(
            f"{path}: the database schema is at version {version}, this RLHF Studio needs {len(MIGRATIONS)};"
            f" restart `rlhf-studio serve` (or run any rlhf-studio command on it) to migrate it"
        )


class ConnectionPool:
    """Idle request connections to one database, handed to one request at a time and reused.

    For a server's request handlers: opening a connection (open_db with migrate=False: the pragmas and the
    schema check) was ~0.4 ms of CPU per request, a tenth of what a label cost the labelling handler. A
    connection goes back to the pool only after a request that ended without an exception and outside a
    transaction; any other is closed. When the database file is no longer the one a connection opened (a
    backup restored by replacing the file), that connection is closed and a new one opened, which checks
    the schema again (open_db), as a per-request connection would.
    """

    def __init__(self, path: str | Path, *, max_idle: int = 4, busy_timeout_ms: int = BUSY_TIMEOUT_MS):
        self.path, self.max_idle, self.busy_timeout_ms = str(path), max_idle, busy_timeout_ms
        self._idle: list[tuple[sqlite_utils.Database, tuple[int, int] | None]] = []  # (db, file identity)
        self._lock = threading.Lock()

    def _identity(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_dev, stat.st_ino

    def _take(self) -> tuple[sqlite_utils.Database, tuple[int, int] | None]:
        identity = self._identity()
        stale = []
        try:
            with self._lock:
                while self._idle:
                    db, opened = self._idle.pop()
                    if identity is not None and opened == identity:
                        return db, opened
                    stale.append(db)
        finally:
            for db in stale:
                db.conn.close()
        # Opened without migrating or creating: the server migrated at start-up (see open_db).
        return open_db(self.path, migrate=False, create=False, busy_timeout_ms=self.busy_timeout_ms), identity

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite_utils.Database]:
        """`with pool.connection() as db:` a connection for this request alone; reused afterwards."""
        db, identity = self._take()
        reusable = False
        try:
            yield db
            reusable = not db.conn.in_transaction
        finally:
            if reusable:
                with self._lock:
                    if len(self._idle) < self.max_idle:
                        self._idle.append((db, identity))
                        db = None
            if db is not None:
                db.conn.close()

    def close(self) -> None:
        """Close the idle connections (those in use close when their request ends)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for db, _ in idle:
            db.conn.close()


@contextlib.contextmanager
def write_transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception. Not re-entrant."""
    conn = db.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException as error:
        if conn.in_transaction:  # SQLite may have rolled back itself (SQLITE_FULL can)
            conn.execute("ROLLBACK")
        if is_disk_full(error):
            raise DiskFull() from error
        raise
    else:
        try:
            conn.execute("COMMIT")
        except sqlite3.OperationalError as error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if is_disk_full(error):
                raise DiskFull() from error
            raise


# Ids bound per statement by rows_by_ids: under SQLite's default variable limit of old builds (999).
IDS_PER_STATEMENT = 900


def rows_by_ids(db: sqlite_utils.Database, sql: str, ids: Iterable[int]) -> list[sqlite3.Row]:
    """Rows of `sql`, whose one `IN ({marks})` takes the ids, for all of `ids` (deduplicated, ascending), read in
    chunks of IDS_PER_STATEMENT."""
    ordered, rows = sorted({int(i) for i in ids}), []
    for start in range(0, len(ordered), IDS_PER_STATEMENT):
        chunk = ordered[start : start + IDS_PER_STATEMENT]
        rows += db.execute(sql.format(marks=", ".join("?" * len(chunk))), chunk).fetchall()
    return rows


def schema_version(db: sqlite_utils.Database) -> int:
    if "schema_version" not in db.table_names():
        return 0
    row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return row[0] or 0


def migrate(db: sqlite_utils.Database) -> int:
    """Apply every forward migration newer than the stored version, each in its own transaction.

    An up-to-date database is only read (no BEGIN IMMEDIATE): opening it never waits behind a writer.
    """
    if schema_version(db) >= len(MIGRATIONS):
        return schema_version(db)
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


_apply_migrations = migrate


def backup(db: sqlite_utils.Database, out: str | Path) -> Path:
    """A consistent copy of a live database through SQLite's backup API (never a file copy).

    Written to a temporary file beside `out` (mode 0600: a backup holds password hashes), then renamed over
    it, so an existing backup is replaced only by a complete one: a failed or interrupted backup leaves the
    old one as it was.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(handle)
    try:
        os.chmod(temporary, 0o600)
        target = sqlite3.connect(temporary)
        try:
            db.conn.backup(target)
        finally:
            target.close()
        os.replace(temporary, out)
    except BaseException:
        for leftover in (temporary, f"{temporary}-wal", f"{temporary}-shm", f"{temporary}-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
        raise
    return out
