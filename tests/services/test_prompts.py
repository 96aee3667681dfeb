import json

import pytest

from labeler.errors import InputError
from labeler.services.data.projects import create_project
from labeler.services.data.prompts import (ImportResult, add_prompts, count_prompts, import_prompts,
                                           import_shipped_prompts, list_prompts)


def stored(db, project_id=1):
    return [
        (row[0], json.loads(row[1]) if row[1] else None, row[2])
        for row in db.execute("SELECT text, messages_json, source FROM prompts WHERE project_id = ? ORDER BY id", [project_id])
    ]


def test_csv_with_quoted_multiline_cell_and_extra_columns(db, tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('id,prompt\n1,"I watched this film, and"\n2,"Two\nlines"\n3,I watched this film and\n', encoding="utf-8")
    assert import_prompts(db, path) == ImportResult(added=3, duplicates=0)
    assert stored(db) == [("I watched this film, and", None, "p.csv"), ("Two\nlines", None, "p.csv"),
                          ("I watched this film and", None, "p.csv")]


def test_txt_skips_blank_lines_and_dedupes_within_file_and_against_db(db, tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("alpha\n\n  \nbeta\nalpha\r\ngamma\n", encoding="utf-8")
    assert import_prompts(db, path, source="mine") == ImportResult(added=3, duplicates=1)  # second alpha
    again = tmp_path / "q.txt"
    again.write_text("beta\ndelta\n", encoding="utf-8")
    assert import_prompts(db, again) == ImportResult(added=1, duplicates=1)
    assert [t for t, _, _ in stored(db)] == ["alpha", "beta", "gamma", "delta"]
    assert stored(db)[0][2] == "mine"


def test_jsonl_plain_and_conversational(db, tmp_path):
    conversation = [
        {"role": "system", "content": "You review films."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Review Alien."},
        {"role": "assistant", "content": "the answer, dropped"},
    ]
    lines = [
        {"prompt": "plain one"},
        {"messages": conversation},
        {"messages": [{"role": "user", "content": "plain one"}]},  # a single user turn is the plain prompt
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},  # TRL prompt list
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    assert import_prompts(db, path) == ImportResult(added=3, duplicates=1)
    assert stored(db) == [
        ("plain one", None, "p.jsonl"),
        ("Review Alien.", conversation[:4], "p.jsonl"),
        ("Hi", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "p.jsonl"),
    ]


def test_json_array_parquet_and_datasets_folder(db, tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.json").write_text(json.dumps([{"prompt": "from json"}]), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist([{"prompt": "from parquet", "n": 1}, {"prompt": "from json", "n": 2}]), tmp_path / "b.parquet")
    datasets.DatasetDict({
        "train": datasets.Dataset.from_list([{"prompt": "train one"}, {"prompt": "train two"}]),
        "test": datasets.Dataset.from_list([{"prompt": "test one"}]),
    }).save_to_disk(str(tmp_path / "dd"))
    datasets.Dataset.from_list([{"prompt": "single split"}]).save_to_disk(str(tmp_path / "ds"))
    assert import_prompts(db, tmp_path / "a.json") == ImportResult(1, 0)
    assert import_prompts(db, tmp_path / "b.parquet") == ImportResult(1, 1)
    assert import_prompts(db, tmp_path / "dd") == ImportResult(3, 0, heldout=1)  # the dataset's own test split
    assert import_prompts(db, tmp_path / "ds") == ImportResult(1, 0)
    assert [t for t, _, _ in stored(db)] == ["from json", "from parquet", "train one", "train two", "test one", "single split"]
    assert [row[0] for row in db.execute("SELECT text FROM prompts WHERE split = 'test'")] == ["test one"]


@pytest.mark.parametrize(
    "name, content, where, field",
    [
        ("p.csv", "text\nhello\n", "line 2", "prompt"),  # missing column
        ("p.csv", "id,prompt\n1,ok\n2,\n", "line 3", "prompt"),  # empty cell
        ("p.jsonl", '{"prompt": "ok"}\n{"prompt": "broken"\n', "line 2", None),  # invalid JSON
        ("p.jsonl", '{"prompt": "ok"}\n{"prompt": 42}\n', "line 2", "prompt"),  # not a string
        ("p.jsonl", '{"prompt": "ok"}\n\n{"prompt": "   "}\n', "line 3", "prompt"),  # empty after blank line
        ("p.jsonl", '{"prompt": "ok"}\n{"prompt": "nul \\u0000 here"}\n', "line 2", "prompt"),  # NUL in a JSON string
        ("p.jsonl", '{"messages": [{"role": "user", "content": 3}]}\n', "line 1", "messages[0].content"),
        ("p.jsonl", '{"messages": [{"role": "wizard", "content": "x"}]}\n', "line 1", "messages[0].role"),
        ("p.jsonl", '{"messages": [{"role": "assistant", "content": "x"}]}\n', "line 1", "messages"),  # no user turn
        ("p.jsonl", '{"messages": "hello"}\n', "line 1", "messages"),
        ("p.jsonl", '["a list"]\n', "line 1", None),
        # Longer than readers.MAX_TEXT_CHARS (100,000): a prompt, and one message of a conversation.
        ("p.txt", "ok\n" + "x" * 100_001 + "\n", "line 2", "prompt"),
        ("p.jsonl", '{"prompt": "ok"}\n{"messages": [{"role": "user", "content": "%s"}]}\n' % ("y" * 100_001),
         "line 2", "messages[0].content"),
    ],
)
def test_malformed_files_name_file_line_field_and_write_nothing(db, tmp_path, name, content, where, field):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as error:
        import_prompts(db, path)
    message = str(error.value)
    assert str(path) in message and where in message
    if field is not None:
        assert f"field '{field}" in message
    assert db["prompts"].count == 0  # the good first line was not written either


@pytest.mark.parametrize(
    "name, data, where, what",
    [
        ("p.csv", b"id,prompt\n1,ok\n2,bad \xff byte\n", "line 3, field 'prompt'", "invalid UTF-8 (byte 0xff)"),
        ("p.csv", b"prompt\nok\nnul\x00\n", "line 3, field 'prompt'", "NUL byte"),
        ("p.txt", b"ok\nbad \xc3(\n", "line 2, field 'prompt'", "invalid UTF-8 (byte 0xc3)"),
        ("p.jsonl", b'{"prompt": "ok"}\n{"messages": [{"role": "user", "content": "x\xfe"}]}\n',
         "line 2, field 'messages[0].content'", "invalid UTF-8 (byte 0xfe)"),
    ],
)
def test_invalid_utf8_and_nul_bytes_name_line_and_field(db, tmp_path, name, data, where, what):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(InputError) as error:
        import_prompts(db, path)
    assert f"{path}, {where}: " in str(error.value) and what in str(error.value)
    assert db["prompts"].count == 0


def test_bad_parquet_row_is_named_as_a_row(db, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "fine"}, {"prompt": ""}]), path)
    with pytest.raises(InputError, match=r"p.parquet row 2, field 'prompt': is empty"):
        import_prompts(db, path)
    assert db["prompts"].count == 0


def test_unsupported_missing_and_empty_files(db, tmp_path):
    (tmp_path / "p.xlsx").write_bytes(b"PK")
    with pytest.raises(InputError, match="unsupported file type"):
        import_prompts(db, tmp_path / "p.xlsx")
    with pytest.raises(InputError, match="file not found"):
        import_prompts(db, tmp_path / "missing.csv")
    (tmp_path / "folder").mkdir()
    with pytest.raises(InputError, match="not a saved datasets folder"):
        import_prompts(db, tmp_path / "folder")
    (tmp_path / "fake.parquet").write_text("prompt\nhello\n")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        import_prompts(db, tmp_path / "fake.parquet")
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="no prompts found"):
        import_prompts(db, tmp_path / "empty.txt")


def test_projects_are_separate_and_utf8_bom_is_ignored(db, tmp_path):
    create_project(db, "other")
    path = tmp_path / "p.txt"
    path.write_bytes("\ufeffcafé ☕\n".encode("utf-8"))
    assert import_prompts(db, path) == ImportResult(1, 0)
    assert import_prompts(db, path, project="other") == ImportResult(1, 0)  # same text, other project: not a duplicate
    assert stored(db, 2)[0][0] == "café ☕"
    with pytest.raises(InputError, match="unknown project"):
        import_prompts(db, path, project="ghost")


def test_add_prompts_list_and_count(db):
    assert add_prompts(db, ["one", "two", "one"], source="ui") == ImportResult(2, 1)
    with pytest.raises(InputError, match="row 2, field 'prompt'"):
        add_prompts(db, ["three", ""])
    assert count_prompts(db) == 2
    rows = list_prompts(db, limit=1, offset=1)
    assert [(r["text"], r["messages"], r["source"], r["responses"]) for r in rows] == [("two", None, "ui", 0)]


def test_shipped_movie_prompts(db):
    result = import_shipped_prompts(db)
    assert result.added >= 120 and result.duplicates == 0
    assert import_shipped_prompts(db) == ImportResult(0, result.added)  # idempotent
    texts = [r["text"] for r in list_prompts(db, limit=1000)]
    assert "I watched this film last night and" in texts
    assert all(t == t.strip() and len(t) < 120 for t in texts)


def test_unicode_line_separators_inside_a_line_do_not_split_it(db, tmp_path):
    path = tmp_path / "p.jsonl"
    text = "first\u2028still first\x85and\x0cstill"
    path.write_text(json.dumps({"prompt": text}, ensure_ascii=False) + "\r\n" + json.dumps({"prompt": "second"}) + "\n", encoding="utf-8")
    assert import_prompts(db, path) == ImportResult(2, 0)
    assert [t for t, _, _ in stored(db)] == [text, "second"]


def test_a_prompt_at_the_length_limit_is_accepted_one_over_is_not(db):
    from labeler.services.data.readers import MAX_TEXT_CHARS

    assert add_prompts(db, ["a" * MAX_TEXT_CHARS]).added == 1
    with pytest.raises(InputError, match="100,001 characters: at most 100,000") as error:
        add_prompts(db, ["fine", "b" * (MAX_TEXT_CHARS + 1)])
    assert "prompts row 2, field 'prompt'" in str(error.value)
    assert db["prompts"].count == 1


def test_invalid_json_message_reads_as_english(db, tmp_path):
    # json's "Unterminated string starting at" must not become "... starting at at column".
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": "never closed\n', encoding="utf-8")
    with pytest.raises(InputError) as error:
        import_prompts(db, bad)
    message = str(error.value)
    assert "line 2" in message and "Unterminated string starting at column 12" in message
    assert "at at" not in message
