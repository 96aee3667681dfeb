"""labeler/services/data/readers.py: every file kind read to (where, record) pairs; errors name file, line and field."""
import pytest

from labeler.errors import InputError
from labeler.services.data.readers import (MAX_TEXT_CHARS, Where, check_messages, check_text, decode_text, read_records,
                                           require_text)


def records(path, **kwargs):
    return [(where.number, record) for where, record in read_records(path, **kwargs)]


def test_txt_jsonl_json_csv_tsv_with_their_line_numbers(tmp_path):
    (tmp_path / "p.txt").write_bytes("\ufefffirst\r\n\n  \nsecond\u2028half\n".encode())  # BOM, CRLF, U+2028 kept
    assert records(tmp_path / "p.txt") == [(1, {"prompt": "first"}), (4, {"prompt": "second\u2028half"})]
    assert records(tmp_path / "p.txt", txt_field="text") == [(1, {"text": "first"}), (4, {"text": "second\u2028half"})]
    (tmp_path / "p.jsonl").write_text('{"prompt": "a"}\n\n{"prompt": "b", "n": 2}\n', encoding="utf-8")
    assert records(tmp_path / "p.jsonl") == [(1, {"prompt": "a"}), (3, {"prompt": "b", "n": 2})]
    (tmp_path / "p.json").write_text('[{"prompt": "a"}, {"prompt": "b"}]', encoding="utf-8")
    assert [r for _, r in records(tmp_path / "p.json")] == [{"prompt": "a"}, {"prompt": "b"}]
    (tmp_path / "p.csv").write_text('prompt,id\n"two\nlines",1\nplain,2\n', encoding="utf-8")
    # the record after a quoted two-line cell starts on line 4 of the file
    assert records(tmp_path / "p.csv") == [(2, {"prompt": "two\nlines", "id": "1"}), (4, {"prompt": "plain", "id": "2"})]
    (tmp_path / "p.tsv").write_text("prompt\tid\nx, y\t1\n", encoding="utf-8")
    assert records(tmp_path / "p.tsv") == [(2, {"prompt": "x, y", "id": "1"})]


def test_bad_files_name_file_and_line(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        read_records(tmp_path / "missing.txt")
    (tmp_path / "p.docx").write_text("x")
    with pytest.raises(InputError, match="unsupported file type '.docx'"):
        read_records(tmp_path / "p.docx")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n', encoding="utf-8")
    with pytest.raises(InputError) as error:
        list(read_records(tmp_path / "bad.jsonl"))
    assert (error.value.file, error.value.line) == (str(tmp_path / "bad.jsonl"), 2)
    (tmp_path / "latin1.txt").write_bytes(b"ok\ncaf\xe9\n")
    with pytest.raises(InputError) as error:
        list(read_records(tmp_path / "latin1.txt"))
    assert error.value.line == 2 and "byte 0xe9" in error.value.message


def test_parquet_rows_are_named_rows_not_lines(tmp_path):
    import pandas as pd

    pd.DataFrame({"prompt": ["a", "b"]}).to_parquet(tmp_path / "p.parquet")
    read = list(read_records(tmp_path / "p.parquet"))
    assert [(w.number, w.unit, r) for w, r in read] == [(1, "row", {"prompt": "a"}), (2, "row", {"prompt": "b"})]
    error = read[1][0].error("is empty", "prompt")
    assert str(error) == f"{tmp_path / 'p.parquet'} row 2, field 'prompt': is empty"


def test_decode_text_strict_utf8_without_nul(tmp_path):
    (tmp_path / "g.md").write_bytes("\ufeff# Rate\nkindly\n".encode())
    assert decode_text(tmp_path / "g.md") == "# Rate\nkindly\n"
    (tmp_path / "u16.md").write_bytes("ab\ncd".encode("utf-16-le"))
    with pytest.raises(InputError, match="NUL byte") as error:
        decode_text(tmp_path / "u16.md")
    assert error.value.line == 1


def test_require_text_check_text_and_messages():
    where = Where("f.jsonl", 3)
    assert require_text(where, {"prompt": "hi"}, "prompt") == "hi"
    cases = [
        (lambda: require_text(where, {"text": "x"}, "prompt"), "missing 'prompt' (columns present: text)", "prompt"),
        (lambda: require_text(where, {"prompt": 5}, "prompt"), "must be a string, got int", "prompt"),
        (lambda: check_text(where, "  ", "chosen"), "is empty", "chosen"),
        (lambda: check_text(where, "a\x00b", "chosen"), "contains a NUL character", "chosen"),
        (lambda: check_text(where, "x" * (MAX_TEXT_CHARS + 1), "chosen"), "100,001 characters: at most 100,000", "chosen"),
        (lambda: check_messages(where, [], "messages"), "must be a non-empty list of {'role', 'content'} messages, got list",
         "messages"),
        (lambda: check_messages(where, [{"role": "bot", "content": "x"}], "messages"),
         "unknown role 'bot' (use system, user, assistant, tool)", "messages[0].role"),
        (lambda: check_messages(where, [{"role": "user", "content": 1}], "messages"), "must be a string, got int",
         "messages[0].content"),
    ]
    for call, message, field in cases:
        with pytest.raises(InputError) as error:
            call()
        assert (error.value.file, error.value.line, error.value.message, error.value.field) == ("f.jsonl", 3, message, field)
    messages = [{"role": "user", "content": "hi", "name": "x"}]
    assert check_messages(where, messages, "messages") == [{"role": "user", "content": "hi"}]  # extra keys dropped
