"""Every kind of bad file the CLI reads (issue 10): exit status 2, one line on stderr naming the file and, where
the file has them, the line and the field, and not one byte of the database changed.

The database is seeded through the same CLI (prompts, a labelled pair, a user, a project with guidelines, the
model registry), so "nothing written" is checked against real rows: the whole SQL dump before and after must be
equal, not only the row counts.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from labeler.cli import main

pytestmark = pytest.mark.reliability

LONG = "x" * 100_001  # one character over readers.MAX_TEXT_CHARS


def _parquet(rows: list[dict]) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def _jsonl(*records) -> bytes:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records).encode()


GOOD_PAIR = {"prompt": "p", "chosen": "good", "rejected": "bad"}

# (case id, command before the file, file name, file bytes, the file's line in the message (None: the file has
# no lines to name, e.g. Parquet rows or a whole-file problem), the field in the message, words of the message)
CASES = [
    # --- prompts import --------------------------------------------------------------------------------------
    ("csv-no-prompt-column", ["prompts", "import"], "p.csv", b"text\nhello\n", 2, "prompt", "missing 'prompt'"),
    ("csv-too-many-cells", ["prompts", "import"], "p.csv", b'prompt\nfine\n"a",b\n', 3, None, "2 cells but the header has 1"),
    ("csv-empty-cell", ["prompts", "import"], "p.csv", b"prompt,source\nfine,x\n ,y\n", 3, "prompt", "is empty"),
    ("csv-unclosed-quote", ["prompts", "import"], "p.csv", b'prompt\nfine\n"never closed\nmore\n', 3, None,
     "invalid CSV (unexpected end of data)"),
    ("csv-text-after-quote", ["prompts", "import"], "p.csv", b'prompt\nfine\n"a"b\n', 3, None, "invalid CSV"),
    ("jsonl-broken-json", ["prompts", "import"], "p.jsonl", b'{"prompt": "fine"}\n{"prompt": "half\n', 2, None,
     "invalid JSON"),
    ("jsonl-not-an-object", ["prompts", "import"], "p.jsonl", _jsonl(["a list"]), 1, None, "expected a JSON object"),
    ("jsonl-prompt-is-a-number", ["prompts", "import"], "p.jsonl", _jsonl({"prompt": "ok"}, {"prompt": 7}), 2, "prompt",
     "must be a string or a list of messages"),
    ("jsonl-unknown-role", ["prompts", "import"], "p.jsonl",
     _jsonl({"messages": [{"role": "wizard", "content": "hi"}]}), 1, "messages[0].role", "unknown role 'wizard'"),
    ("jsonl-no-user-turn", ["prompts", "import"], "p.jsonl",
     _jsonl({"messages": [{"role": "system", "content": "be nice"}]}), 1, "messages", "has no user message"),
    ("jsonl-content-not-text", ["prompts", "import"], "p.jsonl",
     _jsonl({"messages": [{"role": "user", "content": ["hi"]}]}), 1, "messages[0].content", "must be a string"),
    ("jsonl-nul-character", ["prompts", "import"], "p.jsonl", _jsonl({"prompt": "ok"}, '{"prompt": "a\\u0000b"}'), 2,
     "prompt", "NUL"),
    ("jsonl-too-long", ["prompts", "import"], "p.jsonl", _jsonl({"prompt": "ok"}, {"prompt": LONG}), 2, "prompt",
     "at most 100,000"),
    ("txt-bad-utf8", ["prompts", "import"], "p.txt", b"fine\ncaf\xe9 latte\n", 2, "prompt", "invalid UTF-8 (byte 0xe9)"),
    ("txt-utf16", ["prompts", "import"], "p.txt", "hello\nworld\n".encode("utf-16"), 1, "prompt", "NUL"),
    ("txt-only-blank-lines", ["prompts", "import"], "p.txt", b"\n  \n\n", None, None, "no prompts found"),
    ("json-not-an-array", ["prompts", "import"], "p.json", b'{"prompt": "one"}', None, None, "expected a JSON array"),
    ("json-broken", ["prompts", "import"], "p.json", b'[\n {"prompt": "one"},\n {"prompt": }\n]', 3, None,
     "invalid JSON"),
    ("parquet-garbage", ["prompts", "import"], "p.parquet", b"PAR1 this is not parquet", None, None,
     "not a readable Parquet file"),
    ("parquet-number-prompt", ["prompts", "import"], "p.parquet", _parquet([{"prompt": 1}, {"prompt": 2}]), None,
     "prompt", "row 1"),
    ("unsupported-type", ["prompts", "import"], "p.xlsx", b"PK\x03\x04", None, None, "unsupported file type '.xlsx'"),
    # --- labels import ---------------------------------------------------------------------------------------
    ("pair-missing-rejected", ["labels", "import"], "l.jsonl", _jsonl(GOOD_PAIR, {"prompt": "p", "chosen": "a"}), 2,
     "rejected", "missing 'rejected'"),
    ("pair-chosen-not-text", ["labels", "import"], "l.jsonl", _jsonl({"prompt": "p", "chosen": 3, "rejected": "b"}), 1,
     "chosen", "must be a string"),
    ("pair-no-prompt", ["labels", "import"], "l.jsonl", _jsonl({"chosen": "a", "rejected": "b"}), 1, "prompt",
     "only conversational rows may leave the prompt implicit"),
    ("pair-two-assistant-turns", ["labels", "import"], "l.jsonl", _jsonl({
        "prompt": [{"role": "user", "content": "hi"}],
        "chosen": [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}],
        "rejected": [{"role": "assistant", "content": "c"}]}), 1, "chosen", "exactly one assistant message"),
    ("pair-nothing-shared", ["labels", "import"], "l.jsonl", _jsonl({
        "chosen": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "a"}],
        "rejected": [{"role": "user", "content": "y"}, {"role": "assistant", "content": "b"}]}), 1, "prompt",
     "share no leading prompt messages"),
    ("pair-broken-json", ["labels", "import"], "l.jsonl", _jsonl(GOOD_PAIR, GOOD_PAIR) + b"{oops\n", 3, None,
     "invalid JSON"),
    ("pair-csv-empty-chosen", ["labels", "import"], "l.csv", b"prompt,chosen,rejected\np,good,bad\nq,,bad\n", 3,
     "chosen", "is empty"),
    ("pair-bad-utf8", ["labels", "import"], "l.jsonl", _jsonl(GOOD_PAIR) + b'{"prompt": "p", "chosen": "\xff", '
     b'"rejected": "b"}\n', 2, "chosen", "invalid UTF-8"),
    ("pair-empty-file", ["labels", "import"], "l.jsonl", b"", None, None, "no preference pairs found"),
    # --- train --config (JSON or YAML) -----------------------------------------------------------------------
    ("config-broken-json", ["train", "sft", "--config"], "c.json", b'{"steps": 2,\n "lora": }', 2, None,
     "not valid JSON"),
    ("config-broken-yaml", ["train", "sft", "--config"], "c.yaml", b"steps: 2\nlora: [true\n", 3, None,
     "not valid YAML"),
    ("config-not-a-mapping", ["train", "sft", "--config"], "c.json", b"[1, 2]", None, None,
     "expected a mapping of settings"),
    ("config-unknown-key", ["train", "sft", "--config"], "c.json", b'{"stepz": 3}', None, "stepz", "unknown"),
    ("config-bad-value", ["train", "sft", "--config"], "c.yaml", b"steps: many\n", None, "steps", "many"),
    ("config-bad-utf8", ["train", "sft", "--config"], "c.yaml", b"steps: 2\nname: caf\xe9\n", 2, None,
     "invalid UTF-8"),
    ("config-bad-ppo-combination", ["train", "ppo", "--config"], "c.json",
     b'{"batch_size": 6, "answers_per_prompt": 4}', None, "answers_per_prompt", "must divide batch_size"),
    # --- projects --guidelines -------------------------------------------------------------------------------
    ("guidelines-bad-utf8", ["projects", "create", "newproj", "--guidelines"], "g.md", b"# Rate\n\nna\xefve\n", 3,
     None, "invalid UTF-8"),
    ("guidelines-binary", ["projects", "set", "default", "--guidelines"], "g.md", b"# Rate\n\x00\x01\x02", 2, None,
     "NUL byte"),
]


def _fingerprint(db_path: str) -> tuple[dict, str]:
    """(rows per table, hash of the whole SQL dump): equal before and after means nothing was written."""
    import sqlite3

    conn = sqlite3.connect(db_path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        counts = {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
        digest = hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()
    finally:
        conn.close()
    return counts, digest


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    db = str(root / "studio.db")
    prompts = root / "seed.txt"
    prompts.write_text("A film about a dog\nThe sequel nobody asked for\n", encoding="utf-8")
    pairs = root / "seed.jsonl"
    pairs.write_bytes(_jsonl(GOOD_PAIR))
    guide = root / "guide.md"
    guide.write_text("# Be kind\n", encoding="utf-8")
    for argv in (["prompts", "import", str(prompts), "--create-db", "--no-fit-length"], ["labels", "import", str(pairs)],
                 ["users", "add", "ann", "--password", "ann-password-1"], ["models", "list"],
                 ["projects", "create", "other", "--guidelines", str(guide)]):
        assert main([*argv, "--db", db]) == 0, argv
    counts, _ = _fingerprint(db)
    assert counts["prompts"] == 3 and counts["rankings"] == 1 and counts["users"] == 1 and counts["projects"] == 2
    return root, db


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_file_is_one_line_exit_2_and_writes_nothing(case, seeded, capsys):
    name, command, filename, data, line, field, words = case
    root, db = seeded
    path = root / name / filename
    path.parent.mkdir()
    path.write_bytes(data)
    before = _fingerprint(db)
    capsys.readouterr()

    code = main([*command, str(path), "--db", db])

    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), (code, out, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"rlhf-studio {command[0]}: error: {path}"), err  # the file is named first
    if line is not None:
        assert f"{path}, line {line}" in err, err
    if field is not None:
        assert f"field '{field}'" in err, err
    assert words in err, err
    assert "Traceback" not in err
    assert _fingerprint(db) == before


@pytest.mark.parametrize("command", [["prompts", "import"], ["labels", "import"], ["train", "sft", "--config"],
                                     ["projects", "create", "p2", "--guidelines"]])
def test_missing_file_or_a_folder_instead_of_a_file(command, seeded, capsys):
    root, db = seeded
    before = _fingerprint(db)
    missing = root / "no-such-file.jsonl"
    folder = root / f"folder-{'-'.join(command[:2])}.json"
    folder.mkdir()
    for path in (missing, folder):
        capsys.readouterr()
        code = main([*command, str(path), "--db", db])
        out, err = capsys.readouterr()
        assert (code, out) == (2, "") and err.count("\n") == 1, (path, code, err)
        assert str(path) in err and "Traceback" not in err, err
    assert _fingerprint(db) == before


@pytest.mark.parametrize("path_kind", ["missing", "a file", "no weights"])
def test_models_add_with_a_bad_path(path_kind, seeded, capsys):
    root, db = seeded
    paths = {"missing": root / "no-model", "a file": root / "seed.txt", "no weights": root / "empty-model"}
    path = paths[path_kind]
    if path_kind == "no weights":
        path.mkdir(exist_ok=True)
        (path / "config.json").write_text("{}")
    before = _fingerprint(db)
    capsys.readouterr()
    assert main(["models", "add", "mine", str(path), "--db", db]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert _fingerprint(db) == before


def test_the_same_table_in_a_real_process(seeded, tmp_path):
    """Three rows of the table through `python -m labeler`, as a user runs it: the exit status and stderr are
    the process's own, not what main() returned in this one."""
    root, db = seeded
    before = _fingerprint(db)
    picked = [c for c in CASES if c[0] in ("txt-bad-utf8", "pair-missing-rejected", "config-broken-yaml")]
    script = []
    for name, command, filename, data, *_ in picked:
        path = tmp_path / filename
        path.write_bytes(data)
        script.append((name, [*command, str(path)], path))
    for name, argv, path in script:
        done = subprocess.run([sys.executable, "-m", "labeler", *argv, "--db", db], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and done.stdout == "", (name, done.returncode, done.stderr[-2000:])
        assert done.stderr.count("\n") == 1 and str(path) in done.stderr and ", line " in done.stderr, done.stderr
    assert _fingerprint(db) == before
