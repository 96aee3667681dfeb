"""Helpers every test folder shares (tests/ is on sys.path through tests/conftest.py): a free port, waiting for a
condition, the app served in this process, HTTP requests from a chosen loopback address, logging in over HTTP, a
table's rows as tuples, a stand-in that records its calls, and the seeded databases several test files start from.

    from helpers import free_port, login, rows, serving, session_from, wait_until
"""
from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition, timeout: float = 60.0, what: str = "condition", interval: float = 0.1):
    """condition()'s first truthy value, asked every `interval` seconds; AssertionError naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass(frozen=True)
class Served:
    port: int

    @property
    def url(self) -> str:
        """The app's page: http://127.0.0.1:PORT/"""
        return f"http://127.0.0.1:{self.port}/"

    @property
    def origin(self) -> str:
        """http://127.0.0.1:PORT, for joining paths such as /login."""
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def serving(db_path, root, **settings) -> Iterator[Served]:
    """The app on `db_path`, served from this process on a free port (runs under `root`/runs; `settings`: more
    ServeSettings fields), closed on leaving."""
    from labeler.ui.app import build_app, launch
    from labeler.ui.context import ServeSettings

    config = ServeSettings(db_path=str(db_path), port=free_port(), runs_dir=str(Path(root) / "runs"), **settings)
    app = build_app(config)
    launch(app, config, prevent_thread_lock=True, quiet=True)
    try:
        yield Served(config.port)
    finally:
        app.close()


def session_from(address: str):
    """A requests Session whose connections come from `address` (a loopback address such as 127.0.0.7), as if
    from another machine: what the login throttle tells clients apart by."""
    import requests
    from requests.adapters import HTTPAdapter

    class FromAddress(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            kwargs["source_address"] = (address, 0)
            super().init_poolmanager(*args, **kwargs)

    session = requests.Session()
    session.mount("http://", FromAddress())
    return session


def login(url: str, credentials: tuple[str, str], session=None):
    """POST the login form at `url` (the app's origin) with (username, password), in `session` (a new one when None);
    returns the response, whatever its status."""
    import requests

    session = session or requests.Session()
    return session.post(f"{url}/login", data={"username": credentials[0], "password": credentials[1]}, timeout=60)


def rows(db, sql: str, params=()) -> list[tuple]:
    """Every row the query returns, as plain tuples (so a test compares whole row lists)."""
    return [tuple(row) for row in db.execute(sql, params).fetchall()]


def fill_and_keep(page, selector: str, text: str) -> None:
    """Type into a box of a tab just opened. On a loaded machine Gradio may still be mounting the tab when the text
    lands, and the mount then resets the box (a CI run lost 'abc' that way and refused an empty id): type again,
    as a person who saw the box empty would."""
    box = page.locator(selector).first
    for _ in range(5):
        box.fill(text)
        page.wait_for_timeout(300)
        if box.input_value() == text:
            return
    raise AssertionError(f"{selector} did not keep {text!r}")


def check_rank_0_account(error: str, run_id: int, seen: Sequence[str]) -> None:
    """A dead rank's run error (supervision.record_rank_failure) keeps what rank 0 recorded, one of `seen`, when it
    recorded anything; else the resume command follows the dead rank's log. Rank 0 may record nothing: the
    launcher's SIGTERM waits while rank 0 writes a checkpoint (checkpoints.signal_deferred), and a write that
    outlasts torch elastic's grace ends in SIGKILL (seen in CI on a loaded machine)."""
    stopped = "; the other ranks were stopped (rank 0 recorded: "
    if stopped in error:
        recorded = error.split(stopped, 1)[1]
        assert any(words in recorded for words in seen), error
    else:
        assert error.split("its log: ", 1)[1].split(";", 1)[1].startswith(f" `rlhf-studio runs resume {run_id}` "), error


def recording(result: Any, calls: list) -> Callable[[Any], Any]:
    """A stand-in for a measuring function (run_preview's `measure`): the argument of each call is appended to
    `calls`, and `result` (what the test made up) comes back."""
    def measure(argument):
        calls.append(argument)
        return result
    return measure


def seed_questions(db_path: str, user: tuple[str, str], questions: Sequence[dict], answers: dict[str, Sequence[str]],
                   **items) -> None:
    """A database whose project 'default' asks `questions` (questions.add_question's keyword arguments each, its
    name under "name"), with `user` (username, password) an annotator, each prompt of `answers` with its answers
    (in that order, source 'e2e') and the items labeling.create_items makes of them with `items`."""
    from labeler.services.data import accounts, labeling, prompts
    from labeler.services.labels import questions as project_questions
    from storage import open_db, write_transaction

    db = open_db(db_path)
    try:
        accounts.create_user(db, *user)
        for question in questions:
            project_questions.add_question(db, "default", **question)
        prompts.add_prompts(db, list(answers), source="e2e")
        with write_transaction(db):
            for prompt_id, text in db.execute("SELECT id, text FROM prompts ORDER BY id").fetchall():
                for answer in answers[text]:
                    db.execute("INSERT INTO responses (prompt_id, text, model, source) VALUES (?, ?, 'm', 'e2e')",
                               [prompt_id, answer])
        labeling.create_items(db, "default", **items)
    finally:
        db.conn.close()


@contextlib.contextmanager
def serving_questions(root, user: tuple[str, str], questions: Sequence[dict], answers: dict[str, Sequence[str]],
                      **items) -> Iterator[tuple[str, str]]:
    """seed_questions' database at `root`/studio.db, served from this process: yields (url, db_path). Its own
    server: a project with questions changes what the Rate and Rank keys do, which the shared `running_app`'s
    keyboard tests must not see."""
    db_path = str(Path(root) / "studio.db")
    seed_questions(db_path, user, questions, answers, **items)
    with serving(db_path, root) as server:
        yield server.url, db_path


def rank_good_over_bad(db, username: str, texts: Sequence[str]) -> None:
    """Prompts `texts` in 'default', each with a good and a bad answer ("a good answer to 1"...), and `username`'s
    ranking of each pair, good first (claimed, not served): the data a DPO or reward-model run accepts."""
    import json

    from labeler.services.data import labeling, prompts
    from labeler.services.data.responses import insert_response
    from storage import write_transaction

    prompts.add_prompts(db, list(texts), source="test")
    with write_transaction(db):
        for prompt_id in [row[0] for row in db.execute("SELECT id FROM prompts ORDER BY id")]:
            for answer in ("good", "bad"):
                insert_response(db, prompt_id, f"a {answer} answer to {prompt_id}", model="m", source="test")
    labeling.create_items(db, "default", ranking_size=2, kinds=("ranking",))
    for item in db.execute("SELECT id, response_ids_json FROM items").fetchall():
        good, bad = json.loads(item[1])
        labeling.submit_ranking(db, "default", username, item[0], [[good], [bad]], claim=True)
