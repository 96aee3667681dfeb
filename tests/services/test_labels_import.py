import json

import pytest

from labeler.errors import InputError
from labeler.services.labels.export import ExportOptions, export, preference_rows
from labeler.services.labels.labels_import import import_preferences
from labeler.services.data.prompts import ImportResult, import_prompts
from helpers import rows

PAIRS = [
    {"prompt": "Review Alien", "chosen": "A classic.", "rejected": "Meh."},
    {"prompt": "Review Alien", "chosen": "Tense and smart.", "rejected": "Meh."},
    {"prompt": "Review Heat", "chosen": "Great shootout.", "rejected": "Too long."},
]
# As exported: each pair with where it came from (an import).
IMPORTED = [{**pair, "source": "import"} for pair in PAIRS]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def counts(db):
    return {table: db[table].count for table in ("prompts", "responses", "items", "rankings")}


def test_standard_file_round_trip(db, tmp_path):
    assert import_preferences(db, write_jsonl(tmp_path / "p.jsonl", PAIRS)) == ImportResult(added=3, duplicates=0)
    # "Meh." answers the same prompt twice: one response. Two prompts, five responses, one item + ranking per pair.
    assert counts(db) == {"prompts": 2, "responses": 5, "items": 3, "rankings": 3}
    ranking = db.execute("SELECT user_id, source, order_json FROM rankings ORDER BY id").fetchone()
    assert (ranking[0], ranking[1], json.loads(ranking[2])) == (None, "import", [[1], [2]])
    assert rows(db, "SELECT DISTINCT model, source FROM responses") == [("import", "import")]
    assert preference_rows(db) == IMPORTED
    # Exported, then imported into a fresh project: the same pairs again.
    export(db, "default", "preferences", "parquet", tmp_path / "out.parquet")
    from labeler.services.data.projects import create_project

    create_project(db, "copy")
    assert import_preferences(db, tmp_path / "out.parquet", project="copy") == ImportResult(3, 0)
    assert preference_rows(db, "copy") == IMPORTED


def test_reimport_and_degenerate_pairs(db, tmp_path):
    import_preferences(db, write_jsonl(tmp_path / "p.jsonl", PAIRS))
    before = counts(db)
    rows = PAIRS + [PAIRS[0], {"prompt": "Review Heat", "chosen": "Same.", "rejected": "Same."}]
    assert import_preferences(db, write_jsonl(tmp_path / "q.jsonl", rows)) == ImportResult(added=0, duplicates=4, skipped=1)
    assert counts(db) == before
    # The opposite judgement of a known pair is new evidence: same item, second ranking; 1 vs 1 -> no export row.
    flipped = {"prompt": "Review Heat", "chosen": "Too long.", "rejected": "Great shootout."}
    assert import_preferences(db, write_jsonl(tmp_path / "r.jsonl", [flipped])) == ImportResult(1, 0)
    assert db["items"].count == 3 and db["rankings"].count == 4
    assert preference_rows(db) == IMPORTED[:2]


def test_existing_prompts_and_responses_are_reused(db, tmp_path):
    import_prompts(db, write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "Review Alien"}]))
    with db.conn:
        db.execute("INSERT INTO responses (prompt_id, text, model, source) VALUES (1, 'Meh.', 'default', 'generated')")
    import_preferences(db, write_jsonl(tmp_path / "p.jsonl", PAIRS[:1]))
    assert rows(db, "SELECT id, text, source FROM responses ORDER BY id") == [
        (1, "Meh.", "generated"), (2, "A classic.", "import")
    ]
    assert db["prompts"].count == 1


def test_conversational_explicit_and_implicit_prompt(db, tmp_path):
    system = {"role": "system", "content": "Be brief."}
    user = {"role": "user", "content": "Review Heat"}
    good, bad = {"role": "assistant", "content": "Great."}, {"role": "assistant", "content": "Long."}
    explicit = {"prompt": [system, user], "chosen": [good], "rejected": [bad]}
    implicit = {"chosen": [system, {"role": "user", "content": "Review Alien"}, good],
                "rejected": [system, {"role": "user", "content": "Review Alien"}, bad]}
    assert import_preferences(db, write_jsonl(tmp_path / "c.jsonl", [explicit, implicit])) == ImportResult(2, 0)
    assert rows(db, "SELECT text FROM prompts ORDER BY id") == [("Review Heat",), ("Review Alien",)]
    assert preference_rows(db, options=ExportOptions(conversational=True)) == [
        {**explicit, "source": "import"},
        {"prompt": [system, {"role": "user", "content": "Review Alien"}], "chosen": [good], "rejected": [bad],
         "source": "import"},
    ]


def test_datasets_folder(db, tmp_path):
    import datasets

    datasets.DatasetDict({
        "train": datasets.Dataset.from_list(PAIRS[:2]), "test": datasets.Dataset.from_list(PAIRS[2:]),
    }).save_to_disk(str(tmp_path / "dd"))
    assert import_preferences(db, tmp_path / "dd") == ImportResult(3, 0)
    assert preference_rows(db) == IMPORTED


@pytest.mark.parametrize(
    "row, field",
    [
        ({"prompt": "p", "chosen": "a"}, "rejected"),
        ({"prompt": "p", "chosen": 5, "rejected": "b"}, "chosen"),
        ({"prompt": "p", "chosen": "a", "rejected": ""}, "rejected"),
        ({"chosen": "a", "rejected": "b"}, "prompt"),
        ({"prompt": [{"role": "user", "content": "p"}], "chosen": [{"role": "user", "content": "a"}],
          "rejected": [{"role": "assistant", "content": "b"}]}, "chosen"),
        ({"prompt": [{"role": "user", "content": "p"}], "chosen": "a", "rejected": "b"}, "chosen"),
    ],
)
def test_malformed_rows_name_line_and_field_and_write_nothing(db, tmp_path, row, field):
    path = write_jsonl(tmp_path / "bad.jsonl", [PAIRS[0], row])
    with pytest.raises(InputError) as error:
        import_preferences(db, path)
    assert f"{path}, line 2, field '{field}" in str(error.value)
    assert counts(db) == {"prompts": 0, "responses": 0, "items": 0, "rankings": 0}
