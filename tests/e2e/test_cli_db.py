"""--db mistakes through the CLI: one line on stderr, exit 2, nothing created by accident."""
from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from labeler.cli import main
from labeler.commands import chat, database
from labeler.errors import InputError
from storage import open_db


def test_a_file_that_is_not_a_database_is_one_line_and_exit_2_in_a_real_process(tmp_path):
    junk = tmp_path / "notes.db"
    junk.write_text("shopping list\n" * 100)
    done = subprocess.run(
        [sys.executable, "-m", "labeler", "users", "list", "--db", str(junk)], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"rlhf-studio users: error: {junk}: not an SQLite database (file is not a database)\n"


@pytest.mark.parametrize("argv", [["users", "list"], ["prompts", "list"], ["models", "list"]])
def test_a_mistyped_db_is_not_created(tmp_path, capsys, argv):
    typo = tmp_path / "dta" / "studio.db"
    assert main([*argv, "--db", str(typo)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and f"{typo}: no such database (a typo in --db?)" in err
    assert not typo.parent.exists()


def test_create_db_creates_it(tmp_path, capsys):
    path = tmp_path / "new" / "studio.db"
    assert main(["users", "add", "amy", "--password", "amy-password-1", "--db", str(path), "--create-db"]) == 0
    assert path.exists()
    assert main(["users", "list", "--db", str(path)]) == 0  # exists now: no flag needed
    assert "amy" in capsys.readouterr().out


def test_a_db_under_a_file_or_a_folder_as_db_is_one_line(tmp_path, capsys):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert main(["users", "list", "--db", str(plain / "studio.db"), "--create-db"]) == 2
    assert "cannot create the database's folder" in capsys.readouterr().err
    assert main(["users", "list", "--db", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a folder, not a database file" in err


def test_a_command_closes_its_connection_also_on_an_error(tmp_path, monkeypatch):
    path = tmp_path / "studio.db"
    open_db(path, create=True).conn.close()
    with database(path) as db:
        assert db.execute("SELECT COUNT(*) FROM models").fetchone()[0] == 0
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        db.execute("SELECT 1")
    # `models list` through main(): the service fails, the command answers exit 2, and the connection is closed.
    opened = []

    def failing(db, kind=None):
        opened.append(db)
        raise InputError("no such kind", field="kind")

    monkeypatch.setattr(chat, "list_models", failing)
    assert main(["models", "list", "--db", str(path)]) == 2
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].execute("SELECT 1")
