"""storage: the schema and its forward migrations, and write_transaction's all-or-nothing (moved from test_skeleton)."""
import pytest
import sqlite_utils

from storage import open_db, schema_version, write_transaction
from storage.db import connect, migrate
from storage.migrations import MIGRATIONS


def test_open_db_creates_schema_and_default_project(db_path):
    db = open_db(db_path)
    assert schema_version(db) == len(MIGRATIONS) >= 2
    assert [row["name"] for row in db["projects"].rows] == ["default"]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    # Opening again migrates nothing and duplicates nothing.
    again = open_db(db_path)
    assert schema_version(again) == len(MIGRATIONS)
    assert again["projects"].count == 1
    versions = [row[0] for row in again.execute("SELECT version FROM schema_version ORDER BY version")]
    assert versions == list(range(1, len(MIGRATIONS) + 1))  # each migration recorded once, in order


def test_migration_from_an_older_version_applies_only_newer_steps(db_path):
    db = sqlite_utils.Database(connect(db_path))
    # Simulate a database created before the second migration existed.
    db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT)")
    for statement in MIGRATIONS[0][1]:
        db.execute(statement)
    db.execute("INSERT INTO schema_version (version, name) VALUES (1, 'initial schema')")
    assert "rankings_item" not in {row[1] for row in db.execute("PRAGMA index_list(rankings)").fetchall()}
    assert migrate(db) == len(MIGRATIONS)
    assert "rankings_item" in {row[1] for row in db.execute("PRAGMA index_list(rankings)").fetchall()}
    assert db["projects"].count == 1  # the default project was not inserted twice


def test_a_failing_migration_leaves_the_database_at_the_last_good_version(db_path, monkeypatch):
    db = open_db(db_path)
    broken = [*MIGRATIONS, ("broken", ["CREATE TABLE half_done (id INTEGER)", "INSERT INTO no_such_table VALUES (1)"])]
    monkeypatch.setattr("storage.db.MIGRATIONS", broken)
    with pytest.raises(Exception, match="no_such_table"):
        migrate(db)
    assert schema_version(db) == len(MIGRATIONS)
    assert "half_done" not in db.table_names()  # the statement before the failure was rolled back with it


def test_write_transaction_commits_or_rolls_back_everything(db):
    with write_transaction(db):
        db.execute("INSERT INTO projects (name) VALUES ('kept')")
    with pytest.raises(RuntimeError):
        with write_transaction(db):
            db.execute("INSERT INTO projects (name) VALUES ('dropped')")
            db.execute("UPDATE projects SET overlap = 3 WHERE name = 'default'")
            raise RuntimeError("boom")
    assert [tuple(r) for r in db.execute("SELECT name, overlap FROM projects ORDER BY id")] == [("default", 1), ("kept", 1)]
    # A constraint failure inside the block rolls back the rows written before it, too.
    with pytest.raises(Exception, match="UNIQUE"):
        with write_transaction(db):
            db.execute("INSERT INTO projects (name) VALUES ('new')")
            db.execute("INSERT INTO projects (name) VALUES ('kept')")
    assert [r[0] for r in db.execute("SELECT name FROM projects ORDER BY id")] == ["default", "kept"]
    assert not db.conn.in_transaction
