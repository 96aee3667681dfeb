"""Responses: the one writer of the `responses` table, and its readers for the other services.

Every answer that is stored (generated for labelling, written in chat or the arena, a PPO rollout waiting
for a human score, an imported chosen/rejected text) goes through `insert_response`, so the columns and
their meaning are set in one place.
"""
from __future__ import annotations

import sqlite3
from typing import Iterable

import sqlite_utils

from storage import rows_by_ids


def insert_response(
    db: sqlite_utils.Database,
    prompt_id: int,
    text: str,
    *,
    model: str,
    source: str,
    settings_json: str = "{}",
    run_id: int | None = None,
    server_generated: bool = False,
) -> int:
    """Insert one response inside the caller's transaction; returns its id.

    `model`: the registry name or path that wrote it; `source`: generated, chat, arena, ppo or an import's
    name; `server_generated`: this server generated the text itself (exports leave out chat and arena
    answers without the mark, since their text may have come from the client).
    """
    return db.execute(
        "INSERT INTO responses (prompt_id, text, model, settings_json, source, run_id, server_generated)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [prompt_id, text, model, settings_json, source, run_id, int(server_generated)],
    ).lastrowid


def count_responses(db: sqlite_utils.Database) -> int:
    """All stored responses, of every project."""
    return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


def response_rows(db: sqlite_utils.Database, ids: Iterable[int]) -> dict[int, sqlite3.Row]:
    """{id: row (id, prompt_id, text, model, source, server_generated)} of the responses among `ids`
    (storage.rows_by_ids: in chunks)."""
    rows = rows_by_ids(db, "SELECT id, prompt_id, text, model, source, server_generated FROM responses"
                           " WHERE id IN ({marks})", ids)
    return {row["id"]: row for row in rows}


def response_texts(db: sqlite_utils.Database, ids: Iterable[int]) -> dict[int, str]:
    """{id: text} of the responses among `ids`."""
    return {response_id: row["text"] for response_id, row in response_rows(db, ids).items()}


def find_response(db: sqlite_utils.Database, prompt_id: int, text: str) -> int | None:
    """The oldest response to the prompt with exactly this text, or None."""
    row = db.execute("SELECT id FROM responses WHERE prompt_id = ? AND text = ? ORDER BY id LIMIT 1",
                     [prompt_id, text]).fetchone()
    return None if row is None else row[0]


def response_prompts(db: sqlite_utils.Database, project_id: int) -> dict[int, int]:
    """{response id: its prompt id} of every response to the project's prompts, by prompt then response."""
    return {row[0]: row[1] for row in db.execute(
        "SELECT r.id, r.prompt_id FROM responses r JOIN prompts p ON p.id = r.prompt_id"
        " WHERE p.project_id = ? ORDER BY r.prompt_id, r.id", [project_id])}
