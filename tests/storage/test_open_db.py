"""Opening the database: no write lock for an up-to-date one, no silent creation, one clear error."""
from __future__ import annotations

import sqlite3
import time

import pytest

from storage import StorageError, creation, open_db
from storage.migrations import MIGRATIONS


def test_opening_an_up_to_date_database_does_not_wait_for_a_writer(db_path):
    open_db(db_path).conn.close()
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE projects SET guidelines = 'held'")
    try:
        start = time.monotonic()
        db = open_db(db_path)  # migrate=True, as the CLI opens it: the version check only reads
        elapsed = time.monotonic() - start
        assert db.execute("SELECT guidelines FROM projects").fetchone()[0] == ""  # the writer's change is unseen
        db.conn.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert elapsed < 1.0


def test_migrations_apply_once_and_a_request_connection_skips_them(db_path):
    db = open_db(db_path)
    assert db.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)
    assert "session_epoch" in db["users"].columns_dict
    db.conn.close()
    open_db(db_path, migrate=False).conn.close()  # up to date: opens
    fresh = str(db_path) + ".new"
    # A request-path connection never migrates: an unmigrated (or older) database is one clear error.
    with pytest.raises(StorageError, match=rf"\.new: the database schema is at version 0, this RLHF Studio needs {len(MIGRATIONS)};"
                                           r" restart `rlhf-studio serve`"):
        open_db(fresh, migrate=False)
    raw = sqlite3.connect(fresh)
    assert raw.execute("SELECT name FROM sqlite_master").fetchall() == []  # nothing was migrated
    raw.close()


def test_a_request_connection_refuses_a_database_older_than_the_code(tmp_path, monkeypatch):
    # Issue 15: requests open without migrating; an old backup restored under a running server must not
    # surface as "no such column" in some handler.
    import storage.db

    db_path = str(tmp_path / "old.db")
    with monkeypatch.context() as older_code:
        older_code.setattr(storage.db, "MIGRATIONS", MIGRATIONS[:-1])
        open_db(db_path).conn.close()
    with pytest.raises(StorageError, match=f"at version {len(MIGRATIONS) - 1}, this RLHF Studio needs {len(MIGRATIONS)}"):
        open_db(db_path, migrate=False, create=False)
    open_db(db_path).conn.close()  # a start-up open (serve, a CLI command) migrates it again
    open_db(db_path, migrate=False).conn.close()


def test_a_missing_database_is_not_created_when_creation_is_off(tmp_path):
    path = tmp_path / "typo" / "studio.db"
    with creation(False):
        with pytest.raises(StorageError, match="no such database"):
            open_db(path)
    with pytest.raises(StorageError, match="no such database"):
        open_db(path, create=False)
    assert not path.parent.exists()
    open_db(path).conn.close()  # creation is on by default (tests, the library)
    assert path.exists()


def test_bad_files_are_storage_errors_naming_the_file(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_text("this is not sqlite, " * 100)
    with pytest.raises(StorageError, match=f"{junk}: not an SQLite database"):
        open_db(junk)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    with pytest.raises(StorageError, match="is a folder"):
        open_db(folder)
    under_a_file = tmp_path / "plain.txt"
    under_a_file.write_text("x")
    with pytest.raises(StorageError, match="cannot create the database's folder"):
        open_db(under_a_file / "studio.db")


def test_backup_replaces_the_old_one_only_when_complete_and_is_private(tmp_path, monkeypatch):
    # Issue 10 item 8: backups deleted the old file before writing the new one, and were world-readable.
    import contextlib
    import sqlite3 as sqlite

    from storage import open_db
    from storage.db import backup

    db = open_db(str(tmp_path / "live.db"))
    db.execute("INSERT INTO projects (name) VALUES ('first')")
    out = tmp_path / "backups" / "studio.db"
    backup(db, out)
    assert out.stat().st_mode & 0o777 == 0o600
    db.execute("INSERT INTO projects (name) VALUES ('second')")

    class Failing:  # a database whose backup API fails half-way (disk full, interrupted)
        conn = None

        def backup(self, target):
            target.execute("CREATE TABLE partial (x)")  # something was written to the temporary file
            raise sqlite.OperationalError("database or disk is full")

    failing = Failing()
    failing.conn = failing
    with pytest.raises(sqlite.OperationalError, match="disk is full"):
        backup(failing, out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["studio.db"]  # no temporary file left
    with contextlib.closing(sqlite.connect(out)) as copy:
        names = [row[0] for row in copy.execute("SELECT name FROM projects ORDER BY id")]
    assert names == ["default", "first"]  # the old backup, intact
    backup(db, out)
    with contextlib.closing(sqlite.connect(out)) as copy:
        names = [row[0] for row in copy.execute("SELECT name FROM projects ORDER BY id")]
    assert names == ["default", "first", "second"] and out.stat().st_mode & 0o777 == 0o600
