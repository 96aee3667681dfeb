"""A malformed request writes at most one log line, naming the user and the field, and its client gets a one-line
reason. Issue 48: one chat_send with a malformed 1,000-message history wrote 3,017 lines (every message's
validation error, in Gradio's traceback), a server path in a file input ~24, and the client saw a bare "Error".

20 kinds of malformed input go, through gradio_client as an annotator, to every annotator-facing event that takes
input (and the file inputs, which an annotator may not use at all); each call's log lines are counted: what the
server printed (Gradio prints tracebacks to stderr) and what it logged.
"""
from __future__ import annotations

import logging

import pytest
from helpers import serving

gradio_client = pytest.importorskip("gradio_client")
import gradio_client.client  # noqa: E402
from gradio_client import Client  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

from labeler.services.data import accounts  # noqa: E402
from storage import open_db  # noqa: E402

pytestmark = pytest.mark.reliability

ANNOTATOR = ("hana", "hana-password-1")
ANNOTATOR_EVENTS = ("rate_", "rank_", "arena_", "chat_", "change_own_password")
FILE_EVENTS = ("data_import_prompts", "data_import_labels")
SERVER_FILE = {"path": "/etc/hostname", "meta": {"_type": "gradio.FileData"}, "orig_name": "hostname"}


def deep(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


# name -> the arguments for an event of n inputs
KINDS = {
    "none": lambda n: [None] * n,
    "ints": lambda n: [12345] * n,
    "huge int": lambda n: [10 ** 30] * n,
    "negative": lambda n: [-1] * n,
    "float": lambda n: [1e308] * n,
    "bools": lambda n: [True] * n,
    "nested garbage": lambda n: [{"a": [1, {"b": None, "c": {"d": [[], {}]}}]}] * n,
    "lists": lambda n: [[1, "two", None]] * n,
    "deep list": lambda n: [deep(200)] * n,
    "huge text": lambda n: ["x" * (600_000 // max(n, 1))] * n,
    "control characters": lambda n: ["line one\nline two\r\x00\x1b[31m forged log line"] * n,
    "lone surrogate": lambda n: ["\ud800 broken"] * n,
    "many messages": lambda n: [[{"role": "user", "content": f"message {i}"} for i in range(1000)]] * n,
    "malformed messages": lambda n: [[{"role": "wizard"}, {"content": None}, "just text", 7]] * n,
    "message strings": lambda n: [["hello", "there"]] * n,
    "too few": lambda n: [None] * max(n - 1, 0),
    "too many": lambda n: ["x"] * (n + 3),
    "path text": lambda n: ["../../../../etc/passwd"] * n,
    "server path file": lambda n: [SERVER_FILE] * n,
    "path without meta": lambda n: [{"path": "/etc/hostname"}] * n,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("malformed")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    try:
        accounts.create_user(db, *ANNOTATOR)
    finally:
        db.conn.close()
    with serving(db_path, root) as served:
        yield served


def test_malformed_requests_write_one_line_and_answer_one_line(server, capfd, caplog, monkeypatch):
    assert len(KINDS) == 20
    # Values go as they are: the client would otherwise upload a FileData naming a file of its own machine.
    monkeypatch.setattr(gradio_client.client.Endpoint, "process_input_files", lambda self, *data: data)
    client = Client(server.url, auth=ANNOTATOR, verbose=False)
    endpoints = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    events = {name.lstrip("/"): len(info["parameters"]) for name, info in endpoints.items()
              if name.lstrip("/").startswith(ANNOTATOR_EVENTS + FILE_EVENTS) and info["parameters"]}
    assert {"chat_send", "rate_submit", "rank_submit", "arena_start", "data_import_prompts"} <= set(events)
    caplog.set_level(logging.INFO)
    capfd.readouterr()
    loud, unanswered = [], []
    for event, n_inputs in sorted(events.items()):
        for kind, make in KINDS.items():
            first = len(caplog.records)
            try:
                client.predict(*make(n_inputs), api_name=f"/{event}")
                answer = None
            except AppError as error:
                answer = str(error)
            except Exception as error:  # noqa: BLE001 - refused before the app (413, 422): no log line either
                answer = f"{type(error).__name__}"
            lines = [r.getMessage() for r in caplog.records[first:] if r.levelno >= logging.WARNING
                     and not r.name.startswith(("httpx", "gradio_client"))]
            lines += capfd.readouterr().err.splitlines()
            if len(lines) > 1 or any(ANNOTATOR[0] not in line for line in lines):
                loud.append((event, kind, len(lines), lines[:3]))
            if answer is not None and ("\n" in answer or "upstream Gradio app has raised an exception" in answer):
                unanswered.append((event, kind, answer[:200]))
    assert not loud, loud
    assert not unanswered, unanswered
