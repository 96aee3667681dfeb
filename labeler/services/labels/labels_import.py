"""Import a TRL preference dataset as labels: prompts, responses, one ranking item and ranking per pair.

Accepted rows (TRL's preference formats), from JSONL/JSON/CSV/Parquet or a saved datasets folder:
- standard: {"prompt": str, "chosen": str, "rejected": str}
- conversational: {"prompt": [messages], "chosen": [assistant message], "rejected": [assistant message]}
- conversational, implicit prompt: {"chosen": [messages], "rejected": [messages]}; the shared leading
  messages are the prompt (Anthropic HH in TRL form).
A pair becomes a ranking [[chosen], [rejected]] with user_id NULL and source 'import', so export reads it
like any other ranking. Importing the same pair again adds nothing (counted as duplicate); a pair whose
chosen and rejected texts are identical carries no preference and is skipped (counted). Like prompt
imports, every row is validated before anything is written, and everything is written in one transaction.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from labeler.errors import InputError
from labeler.services.data.labeling import find_item, insert_item, insert_ranking, rankings_from
from labeler.services.data.projects import get_project
from labeler.services.data.prompts import ImportResult, PromptRecord, insert_prompt, parse_prompt
from labeler.services.data.readers import Where, check_messages, require_text, read_records
from labeler.services.data.responses import find_response, insert_response
from storage import write_transaction

SOURCE = "import"
# Imported pairs also become ranking items; below generated items in annotators' queues (priority 0),
# so a large imported dataset never buries fresh work.
IMPORT_PRIORITY = -1


@dataclass(frozen=True)
class PreferencePair:
    prompt: PromptRecord
    chosen: str
    rejected: str


def _answer(where: Where, value, field: str) -> str:
    """The assistant text of a conversational answer: exactly one assistant message."""
    messages = check_messages(where, value, field)
    if len(messages) != 1 or messages[0]["role"] != "assistant":
        raise where.error("must be exactly one assistant message after the prompt", field)
    return messages[0]["content"]


def parse_pair(where: Where, record: dict) -> PreferencePair:
    for field in ("chosen", "rejected"):
        if record.get(field) is None:
            raise where.error(f"missing '{field}' (columns present: {', '.join(map(str, record)) or 'none'})", field)
    chosen, rejected = record["chosen"], record["rejected"]
    if record.get("prompt") is None:
        if not (isinstance(chosen, list) and isinstance(rejected, list)):
            raise where.error("missing 'prompt' (only conversational rows may leave the prompt implicit)", "prompt")
        chosen = check_messages(where, chosen, "chosen")
        rejected = check_messages(where, rejected, "rejected")
        shared = 0
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        if shared == 0:
            raise where.error("chosen and rejected share no leading prompt messages", "prompt")
        record = {"prompt": chosen[:shared], "chosen": chosen[shared:], "rejected": rejected[shared:]}
        chosen, rejected = record["chosen"], record["rejected"]
    prompt = parse_prompt(where, {"prompt": record["prompt"]})
    if isinstance(record["prompt"], list):
        return PreferencePair(prompt, _answer(where, chosen, "chosen"), _answer(where, rejected, "rejected"))
    return PreferencePair(prompt, require_text(where, record, "chosen"), require_text(where, record, "rejected"))


def _response_id(db: sqlite_utils.Database, prompt_id: int, text: str) -> int:
    """An identical answer to the same prompt is the same response (whatever produced it)."""
    found = find_response(db, prompt_id, text)
    if found is not None:
        return found
    return insert_response(db, prompt_id, text, model=SOURCE, source=SOURCE)


def _store_pair(db: sqlite_utils.Database, project_id: int, pair: PreferencePair, source: str, known: set) -> bool:
    """Inside the caller's transaction; False when this exact imported preference is already stored.

    `known` holds (item id, order_json) of the imported rankings so far, read once for the whole import
    rather than queried per pair.
    """
    prompt_id, _ = insert_prompt(db, project_id, pair.prompt, source)
    chosen, rejected = _response_id(db, prompt_id, pair.chosen), _response_id(db, prompt_id, pair.rejected)
    item_id = insert_item(db, project_id, "ranking", prompt_id, [chosen, rejected], priority=IMPORT_PRIORITY, if_new=True)
    if item_id is None:
        item_id = find_item(db, project_id, "ranking", [chosen, rejected])
    order_json = json.dumps([[chosen], [rejected]])
    if (item_id, order_json) in known:
        return False
    known.add((item_id, order_json))
    insert_ranking(db, item_id, prompt_id, None, order_json, source=SOURCE)
    return True


def import_preferences(db: sqlite_utils.Database, path: str | Path, project: str = "default") -> ImportResult:
    """added = pairs stored, duplicates = pairs already stored (or repeated in the file),
    skipped = chosen == rejected."""
    project_id = get_project(db, project).id
    pairs = [parse_pair(where, record) for where, record in read_records(path, txt_field="prompt")]
    if not pairs:
        raise InputError("no preference pairs found", file=str(path))
    useful = [pair for pair in pairs if pair.chosen != pair.rejected]
    added = 0
    with write_transaction(db):
        known = rankings_from(db, SOURCE)
        for pair in useful:
            added += _store_pair(db, project_id, pair, f"import:{Path(path).name}", known)
    return ImportResult(added=added, duplicates=len(useful) - added, skipped=len(pairs) - len(useful))
