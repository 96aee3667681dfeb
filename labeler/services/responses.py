"""Responses: the one writer of the `responses` table.

Every answer that is stored (generated for labelling, written in chat or the arena, a PPO rollout waiting
for a human score, an imported chosen/rejected text) goes through `insert_response`, so the columns and
their meaning are set in one place.
"""
from __future__ import annotations

import sqlite_utils


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
