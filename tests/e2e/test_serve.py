"""`rlhf-studio serve` in a subprocess: first start prints the admin password, answers HTTP, fills the queue."""
from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

from helpers import free_port, wait_until


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        lines.put(line)


def test_serve_first_start(tmp_path, tiny_model_dir):
    from labeler.services.data import accounts
    from storage import open_db

    db_path = tmp_path / "studio.db"
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    process = subprocess.Popen(
        [sys.executable, "-m", "labeler", "serve", "--db", str(db_path), "--port", str(port),
         "--model", str(tiny_model_dir), "--first-prompts", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
    output: list[str] = []

    def password_printed():
        while not lines.empty():
            output.append(lines.get())
        match = re.search(r"one-time password\s*\n\s+(\S+)", "".join(output))
        return match.group(1) if match else None

    def http_ok():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    try:
        password = wait_until(password_printed, 120, "the admin password", interval=0.5)
        assert wait_until(http_ok, 120, "HTTP 200", interval=0.5)
        db = open_db(db_path)
        try:
            # The printed password is the admin's, and it is not stored in clear text.
            assert accounts.authenticate(db, "admin", password) is not None
            # ...and it works once: the first login must replace it (issue 14 item 10).
            assert accounts.get_user(db, "admin").must_change_password is True
            assert db.execute("SELECT COUNT(*) FROM users WHERE password_hash LIKE ?", [f"%{password}%"]).fetchone()[0] == 0
            assert db.execute("SELECT COUNT(*) FROM prompts").fetchone()[0] >= 100  # the shipped prompts
            # 3 prompts x 2 answers generated in the background, queued for rating.
            wait_until(lambda: db.execute("SELECT COUNT(*) FROM items WHERE kind = 'rating'").fetchone()[0] >= 6,
                       180, "first answers", interval=0.5)
            assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 6
        finally:
            db.conn.close()
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    # SIGTERM stops the server by itself within 20 s: it did not have to be killed.
    assert process.returncode != -signal.SIGKILL

    # A second start creates no admin and prints no password; the answers are there already.
    from labeler.commands.serve import prepare

    assert prepare(str(db_path), "default", str(tiny_model_dir)) == (None, False)


def test_serving_conventions_from_the_environment(monkeypatch, tmp_path):
    # Gradio's variables give serve's defaults, RLHF_STUDIO_DB every command's --db; flags still win.
    from labeler.cli import build_parser
    from labeler.ui.app import launch_options
    from labeler.ui.context import ServeSettings

    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7999")
    monkeypatch.setenv("GRADIO_ROOT_PATH", "/studio")
    monkeypatch.setenv("RLHF_STUDIO_DB", str(tmp_path / "env.db"))
    args = build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.root_path, args.db) == ("0.0.0.0", 7999, "/studio", str(tmp_path / "env.db"))
    assert build_parser().parse_args(["serve", "--port", "7001", "--db", "x.db"]).port == 7001
    assert build_parser().parse_args(["prompts", "list"]).db == str(tmp_path / "env.db")
    options = launch_options(ServeSettings(db_path=str(tmp_path / "env.db"), root_path="/studio"))
    assert options["root_path"] == "/studio"
    assert launch_options(ServeSettings(db_path=str(tmp_path / "env.db")))["root_path"] is None


def test_serve_leaves_a_teams_project_as_it_is(tmp_path, tiny_model_dir):
    # Issue 49 item 1: `projects create nimbus` then `serve --project nimbus` imported the movie task into nimbus
    # and switched it to continue / 16 tokens / VADER. Only the default project as created gets the example task.
    from labeler.commands.serve import prepare
    from labeler.services.data import projects, prompts
    from storage import open_db

    db_path = str(tmp_path / "studio.db")
    db = open_db(db_path, create=True)
    try:
        projects.create_project(db, "nimbus", prompt_format="chat", answer_tokens=200)
        projects.update_project(db, "default", answer_tokens=64)  # a team's change to the default project
        before = {p.name: p for p in projects.list_projects(db)}
    finally:
        db.conn.close()

    prepare(db_path, "nimbus", str(tiny_model_dir))
    prepare(db_path, "default", str(tiny_model_dir))

    db = open_db(db_path)
    try:
        assert {p.name: p for p in projects.list_projects(db)} == before
        assert prompts.count_prompts(db, "nimbus") == 0
        assert prompts.count_prompts(db, "default") == 0
    finally:
        db.conn.close()


def test_serve_fills_only_a_new_default_project(tmp_path, tiny_model_dir):
    from labeler.commands.serve import prepare
    from labeler.services.data import projects, prompts
    from storage import open_db

    db_path = str(tmp_path / "studio.db")
    prepare(db_path, "default", str(tiny_model_dir))
    db = open_db(db_path)
    try:
        default = projects.get_project(db, "default")
        assert (default.prompt_format, default.answer_tokens, default.measure) == ("continue", 16, "vader")
        shipped = prompts.count_prompts(db, "default")
        assert shipped >= 100
    finally:
        db.conn.close()
    # A second start adds nothing: the project now has prompts of its own.
    prepare(db_path, "default", str(tiny_model_dir))
    db = open_db(db_path)
    try:
        assert prompts.count_prompts(db, "default") == shipped
    finally:
        db.conn.close()
