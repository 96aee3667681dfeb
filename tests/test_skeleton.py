from storage import open_db, schema_version


def test_open_db_creates_schema_and_default_project(db_path):
    db = open_db(db_path)
    assert schema_version(db) == 1
    assert [row["name"] for row in db["projects"].rows] == ["default"]
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    # Opening again migrates nothing and duplicates nothing.
    again = open_db(db_path)
    assert schema_version(again) == 1
    assert again["projects"].count == 1


def test_tiny_models_build(tiny_model_dir, tiny_encoder_dir):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    assert AutoModelForCausalLM.from_pretrained(tiny_model_dir).config.num_hidden_layers == 2
    assert AutoModelForSequenceClassification.from_pretrained(tiny_encoder_dir).config.num_labels == 1
