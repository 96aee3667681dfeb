from storage import open_db, schema_version
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


def test_tiny_models_build(tiny_model_dir, tiny_encoder_dir):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    assert AutoModelForCausalLM.from_pretrained(tiny_model_dir).config.num_hidden_layers == 2
    assert AutoModelForSequenceClassification.from_pretrained(tiny_encoder_dir).config.num_labels == 1


def test_migration_from_an_older_version_applies_only_newer_steps(db_path):
    import sqlite_utils

    from storage.db import connect, migrate

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
