"""Gold items: a known answer on an item, for quality control, and an item as an admin sees it."""
from __future__ import annotations

import json
import sqlite3

import sqlite_utils

from labeler.services.data import label_kinds
from labeler.errors import InputError
from labeler.services.data.responses import response_texts
from storage import write_transaction

def item_on_scale(db: sqlite_utils.Database, item_id: int) -> sqlite3.Row | None:
    """The item's kind and response_ids_json with its project's likert_min and likert_max, or None."""
    return db.execute("SELECT i.kind, i.response_ids_json, p.likert_min, p.likert_max FROM items i"
                      " JOIN projects p ON p.id = i.project_id WHERE i.id = ?", [item_id]).fetchone()


def set_gold(db: sqlite_utils.Database, item_id: int, gold: dict | None) -> None:
    """Give an item a known answer ({"score": s} or {"order": [[id], ...]}), or None to clear it."""
    with write_transaction(db):
        item = item_on_scale(db, item_id)
        if item is None:
            raise InputError(f"no item {item_id!r}", field="item_id")
        gold_json = None
        if gold is not None:
            canonical = label_kinds.validate_gold(
                item["kind"], gold, json.loads(item["response_ids_json"]), item["likert_min"], item["likert_max"]
            )
            gold_json = json.dumps(canonical)
        db.execute("UPDATE items SET gold_json = ? WHERE id = ?", [gold_json, item_id])


def item_detail(db: sqlite_utils.Database, item_id: int) -> dict:
    """One item as an admin sees it: kind, prompt text, [(response id, text)], gold_json, and why the queue serves
    it where it does (selection_reason: active selection's words, None under arrival order)."""
    row = db.execute(
        "SELECT i.kind, i.response_ids_json, i.gold_json, i.selection_reason, p.text FROM items i"
        " JOIN prompts p ON p.id = i.prompt_id WHERE i.id = ?",
        [item_id],
    ).fetchone()
    if row is None:
        raise InputError(f"no item {item_id}", field="item_id")
    ids = json.loads(row["response_ids_json"])
    texts = response_texts(db, ids)
    return {"kind": row["kind"], "prompt": row["text"], "responses": [(i, texts[i]) for i in ids],
            "gold_json": row["gold_json"], "selection_reason": row["selection_reason"]}
