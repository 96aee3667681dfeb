"""Faults a probe found after the first round (issue 25), each answered with one clear line and nothing written:
deeply nested JSON, a FIFO as an input file, `{"prompt": null}`, an existing empty file as --db, a reused
idempotency key with other content, a full disk (the web says "the disk is full; nothing was saved"). And the
files the studio creates are private: database, WAL, run folders and logs.
"""
from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import threading

import gradio as gr
import pytest

from labeler.cli import main
from labeler.services.data import accounts, labeling, prompts
from labeler.errors import InputError
from storage import open_db, write_transaction
from storage.db import DiskFull

pytestmark = pytest.mark.reliability

NESTED = "[" * 1100 + "]" * 1100  # 2.2 KB: a 31-line RecursionError traceback before


def _dump(path) -> str:
    with sqlite3.connect(path) as conn:
        return "\n".join(conn.iterdump())


@pytest.fixture
def seeded(tmp_path):
    path = str(tmp_path / "studio.db")
    db = open_db(path)
    prompts.add_prompts(db, ["An existing prompt"], source="test")
    db.conn.close()
    return path


def _one_line_error(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.mark.parametrize("name, text, command", [
    ("p.jsonl", '{"prompt": ' + NESTED + "}\n", "prompts import"),
    ("p.json", "[" + NESTED + "]", "prompts import"),
    ("l.jsonl", '{"prompt": "p", "chosen": ' + NESTED + ', "rejected": "b"}\n', "labels import"),
    ("c.json", '{"steps": ' + NESTED + "}", "train rm --config"),
    ("c.yaml", "steps: " + NESTED, "train rm --config"),
], ids=["prompts-jsonl", "prompts-json", "labels-jsonl", "train-json", "train-yaml"])
def test_deeply_nested_input_is_one_line_naming_the_file_and_writes_nothing(seeded, tmp_path, capsys, name, text,
                                                                            command):
    path = tmp_path / name
    path.write_text(text)
    before = _dump(seeded)
    line = _one_line_error(capsys, [*command.split(), str(path), "--db", seeded])
    assert str(path) in line and line.endswith("nested more than 100 levels deep"), line
    assert _dump(seeded) == before


@pytest.mark.parametrize("settings, field", [('{"steps": [1]}', "steps"), ('{"learning_rate": {"a": 1}}', "learning_rate")])
def test_a_list_or_mapping_where_a_number_goes_is_one_line(seeded, tmp_path, capsys, settings, field):
    path = tmp_path / "config.json"
    path.write_text(settings)
    line = _one_line_error(capsys, ["train", "rm", "--config", str(path), "--db", seeded])  # a TypeError before
    assert f"field '{field}': expected" in line and line.endswith(("got list", "got dict")), line


def test_a_fifo_as_input_is_refused_at_once(seeded, tmp_path, capsys):
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    before = _dump(seeded)
    # A process of its own: reading a FIFO that nobody writes to blocked forever before.
    done = subprocess.run([sys.executable, "-m", "labeler.cli", "prompts", "import", str(fifo), "--db", seeded],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"rlhf-studio prompts: error: {fifo}: is a FIFO (named pipe), not a regular file; give a file"
    config = tmp_path / "config.json"
    os.mkfifo(config)
    line = _one_line_error(capsys, ["train", "rm", "--config", str(config), "--db", seeded])  # said "is a folder"
    assert line == f"rlhf-studio train: error: {config}: is a FIFO (named pipe), not a regular file; give a file"
    assert _dump(seeded) == before


def test_a_null_prompt_says_null_not_missing(seeded, tmp_path, capsys):
    path = tmp_path / "null.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": null}\n')
    before = _dump(seeded)
    line = _one_line_error(capsys, ["prompts", "import", str(path), "--db", seeded])
    assert line == f"rlhf-studio prompts: error: {path}, line 2, field 'prompt': is null: needs text or a list of messages"
    assert _dump(seeded) == before


def test_an_empty_file_as_db_is_not_silently_made_a_database(tmp_path, capsys):
    empty = tmp_path / "empty.db"
    empty.touch()
    line = _one_line_error(capsys, ["prompts", "list", "--db", str(empty)])
    assert line == (f"rlhf-studio prompts: error: {empty}: an empty file, not a database (a typo in --db?); "
                    "add --create-db to make it one")
    assert empty.stat().st_size == 0
    assert main(["prompts", "list", "--db", str(empty), "--create-db"]) == 0  # asked for: it becomes one
    assert empty.stat().st_size > 0


@pytest.fixture
def labelled(db):
    accounts.create_user(db, "ann", "ann-password-1")
    prompts.add_prompts(db, ["Prompt one"], source="test")
    with write_transaction(db):
        for k in range(3):
            db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (1, ?, 'fixed')", [f"answer {k}"])
    labeling.create_items(db, "default", ranking_size=3)
    return db


def test_a_reused_key_with_another_score_or_order_is_refused(labelled):
    db = labelled
    item = labeling.next_item(db, "default", "ann", "rating")
    first = labeling.submit_rating(db, "default", "ann", item.item_id, 6, request_id="key-1")
    assert labeling.submit_rating(db, "default", "ann", item.item_id, 6, request_id="key-1") == \
        labeling.LabelResult(first.label_id, created=False)  # a true retry: acknowledged, one label
    with pytest.raises(InputError, match="already used for this item with a different label") as error:
        labeling.submit_rating(db, "default", "ann", item.item_id, 2, request_id="key-1")
    assert error.value.field == "request_id"
    assert [tuple(r) for r in db.execute("SELECT score FROM ratings")] == [(6.0,)]

    ranking = labeling.next_item(db, "default", "ann", "ranking")
    ids = [r["id"] for r in ranking.responses]
    order = [[ids[0]], [ids[1], ids[2]]]
    stored = labeling.submit_ranking(db, "default", "ann", ranking.item_id, order, request_id="key-2")
    # The same order with a tie written the other way round is the same label.
    assert labeling.submit_ranking(db, "default", "ann", ranking.item_id, [[ids[0]], [ids[2], ids[1]]],
                                   request_id="key-2").label_id == stored.label_id
    with pytest.raises(InputError, match="different label"):
        labeling.submit_ranking(db, "default", "ann", ranking.item_id, [[ids[2]], [ids[0]], [ids[1]]],
                                request_id="key-2")
    assert db.execute("SELECT COUNT(*) FROM rankings").fetchone()[0] == 1


def test_a_full_disk_rolls_back_and_says_so(labelled):
    db = labelled
    item = labeling.next_item(db, "default", "ann", "rating")
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own SQLITE_FULL, as a full disk gives it
    with pytest.raises(DiskFull, match="^the disk is full; nothing was saved"):
        labeling.submit_rating(db, "default", "ann", item.item_id, 5, comment="x" * 4_900)
    assert db.execute("SELECT COUNT(*) FROM ratings").fetchone()[0] == 0 and not db.conn.in_transaction
    db.execute("PRAGMA max_page_count = 1073741823")  # space again: no restart needed
    assert labeling.submit_rating(db, "default", "ann", item.item_id, 5, comment="x" * 4_900).created


def test_the_web_says_the_disk_is_full_and_recovers(labelled, db_path, tmp_path, tiny_model_dir, monkeypatch):
    import storage.db

    from labeler.ui.context import ServeSettings, UIContext
    from labeler.ui.tabs import rate
    from storage import ConnectionPool

    opened, real_connect, lock, state = [], storage.db.connect, threading.Lock(), {"full": False}

    def limit(conn) -> None:
        try:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count = {pages if state['full'] else 1073741823}")
        except sqlite3.ProgrammingError:
            pass  # closed since

    def connect(*args, **kwargs):  # every connection the app opens, so the test can fill "the disk" for all
        conn = real_connect(*args, **kwargs)
        with lock:
            opened.append(conn)
            limit(conn)
        return conn

    def disk(full: bool) -> None:
        with lock:
            state["full"] = full
            for conn in opened:
                limit(conn)

    monkeypatch.setattr(storage.db, "connect", connect)
    # The Rate tab's handlers with the context build_app gives them (pooled connections, as the server's).
    ctx = UIContext(ServeSettings(db_path=db_path, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs")),
                    pool=ConnectionPool(db_path))
    request = gr.Request(username="ann")
    key = rate.next_item(ctx, request=request)[6]
    disk(full=True)
    with pytest.raises(gr.Error) as error:
        rate.submit(ctx, 5, "y" * 4_900, key, request=request)
    assert error.value.message.startswith("the disk is full; nothing was saved")
    assert open_db(db_path).execute("SELECT COUNT(*) FROM ratings").fetchone()[0] == 0
    disk(full=False)
    after = rate.submit(ctx, 5, "y" * 4_900, key, request=request)
    assert after[1].startswith("**1** done")
    assert open_db(db_path).execute("SELECT COUNT(*) FROM ratings").fetchone()[0] == 1


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_database_wal_run_folder_and_log_are_private(tmp_path, monkeypatch):
    from labeler.services.training import jobs
    from labeler.services.execution import launch, supervision

    monkeypatch.setattr(os, "umask", os.umask)  # restored below whatever happens
    old = os.umask(0o022)  # the usual umask, under which files were created 0644
    try:
        path = tmp_path / "new" / "studio.db"
        db = open_db(path)
        prompts.add_prompts(db, ["a prompt"], source="test")  # writes the WAL
        assert (_mode(path), _mode(f"{path}-wal"), _mode(path.parent)) == (0o600, 0o600, 0o700)
        # A database created before this release (0644) is made private when a command opens it.
        legacy = tmp_path / "legacy.db"
        open_db(legacy).conn.close()
        os.chmod(legacy, 0o644)
        open_db(legacy).conn.close()
        assert _mode(legacy) == 0o600

        monkeypatch.setenv(launch.LAUNCHER_ENV, "python")
        run = jobs.create_run(db, "sft", {"steps": 1}, runs_dir=tmp_path / "runs", start=False)
        monkeypatch.setattr(supervision.subprocess, "Popen",
                            lambda *a, **k: type("P", (), {"pid": 1, "wait": lambda s: 0})())
        supervision.spawn(run, ["true"])
        assert (_mode(tmp_path / "runs"), _mode(run.output_dir), _mode(run.log_path)) == (0o700, 0o700, 0o600)
    finally:
        os.umask(old)
