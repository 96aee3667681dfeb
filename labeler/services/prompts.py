"""Prompts: import from files (CSV, JSONL, JSON, .txt, Parquet, saved datasets), dedupe, list.

A prompt is plain text, or a conversation (`messages_json`: the messages before the answer, ending with
the user's turn; `text` is then that last user message, which is what the labelling screen shows).
A conversation that is a single user turn is stored as plain text, so "Hi" from a .txt file and
[{"role": "user", "content": "Hi"}] from a chat file are the same prompt.

Duplicates are prompts with the same hash in the project (exact text, or exact conversation); they are
skipped and counted, within the file as well. An import is all-or-nothing: every record is validated
before the first INSERT, and the INSERTs share one transaction.

This module owns the prompts table: it is its one writer, and the other services read it through the functions
here (a view joining it with other tables says so in its own module docstring).
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

import sqlite_utils

from labeler.services.errors import InputError
from labeler.services.projects import get_project, update_project
from labeler.services.readers import Where, check_messages, check_text, read_records
from storage import rows_by_ids, write_transaction

SHIPPED_PROMPTS = Path(__file__).resolve().parent.parent / "data" / "movie_prompts.txt"


@dataclass(frozen=True)
class ImportResult:
    added: int
    duplicates: int
    skipped: int = 0  # records dropped for a stated reason (labels import: pairs with chosen == rejected)


@dataclass(frozen=True)
class PromptRecord:
    text: str
    messages: list[dict] | None  # None for a plain-text prompt

    @property
    def text_hash(self) -> str:
        if self.messages is None:
            return hashlib.sha256(self.text.encode("utf-8")).hexdigest()
        canonical = json.dumps(self.messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(("messages\n" + canonical).encode("utf-8")).hexdigest()

    @property
    def messages_json(self) -> str | None:
        return None if self.messages is None else json.dumps(self.messages, ensure_ascii=False)


def prompt_from_messages(where: Where, messages: list[dict], field: str) -> PromptRecord:
    """The conversation up to and including the last user turn; what follows it is the answer."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is None:
        raise where.error("has no user message", field)
    conversation = messages[: last_user + 1]
    text = conversation[-1]["content"]
    if len(conversation) == 1:
        return PromptRecord(text, None)
    return PromptRecord(text, conversation)


def parse_prompt(where: Where, record: dict) -> PromptRecord:
    """A prompt record: {"prompt": "..."}, {"prompt": [messages]} (TRL conversational) or {"messages": [...]}."""
    if record.get("prompt") is None and record.get("messages") is not None:
        return prompt_from_messages(where, check_messages(where, record["messages"], "messages"), "messages")
    if record.get("prompt") is None:
        if "prompt" in record:  # {"prompt": null}: the column is there, its value is not
            raise where.error("is null: needs text or a list of messages", "prompt")
        present = ", ".join(map(str, record)) or "none"
        raise where.error(f"missing 'prompt' (or 'messages'); columns present: {present}", "prompt")
    value = record["prompt"]
    if isinstance(value, list):
        return prompt_from_messages(where, check_messages(where, value, "prompt"), "prompt")
    if not isinstance(value, str):
        raise where.error(f"must be a string or a list of messages, got {type(value).__name__}", "prompt")
    return PromptRecord(check_text(where, value, "prompt"), None)


# The split of prompts typed by annotators in Chat and Arena: out of the training prompts (PPO's, GRPO's) and of
# Generate's work until an admin promotes them (promote_prompts), since anyone with a login types them.
TYPED_SPLIT = "chat"


def insert_prompt(db: sqlite_utils.Database, project_id: int, prompt: PromptRecord, source: str,
                  split: str = "train") -> tuple[int, bool]:
    """(prompt id, created?) inside the caller's transaction; an existing identical prompt is reused as it is
    (its split too: a held-out prompt typed in Chat stays held out, and is not added again)."""
    cursor = db.execute(
        "INSERT INTO prompts (project_id, text, messages_json, text_hash, source, split) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (project_id, text_hash) DO NOTHING",
        [project_id, prompt.text, prompt.messages_json, prompt.text_hash, source, split],
    )
    if cursor.rowcount:
        return cursor.lastrowid, True
    row = db.execute(
        "SELECT id FROM prompts WHERE project_id = ? AND text_hash = ?", [project_id, prompt.text_hash]
    ).fetchone()
    return row[0], False


def promote_prompts(db: sqlite_utils.Database, project: str = "default", prompt_ids: Iterable[int] | None = None) -> int:
    """An admin's review: prompts typed in Chat or Arena (split TYPED_SPLIT) join the training prompts (split
    'train'), all of the project's or those of `prompt_ids`. Returns how many moved; an id that is not a typed
    prompt of the project is an InputError, and then nothing moves."""
    project_id = get_project(db, project).id
    with write_transaction(db):
        if prompt_ids is None:
            return db.execute("UPDATE prompts SET split = 'train' WHERE project_id = ? AND split = ?",
                              [project_id, TYPED_SPLIT]).rowcount
        ids = sorted({int(i) for i in prompt_ids})
        typed = {row[0] for row in db.execute(
            f"SELECT id FROM prompts WHERE project_id = ? AND split = ? AND id IN ({','.join('?' * len(ids))})",
            [project_id, TYPED_SPLIT, *ids])} if ids else set()
        others = [i for i in ids if i not in typed]
        if others:
            raise InputError(f"not prompts typed in Chat or Arena of project '{project}': {others}", field="prompt_ids")
        db.conn.executemany("UPDATE prompts SET split = 'train' WHERE id = ?", [(i,) for i in ids])
        return len(ids)


# ---- reads: the other services read the prompts table through these -------------------------------------

def prompt_text(db: sqlite_utils.Database, prompt_id: int) -> str:
    return db.execute("SELECT text FROM prompts WHERE id = ?", [prompt_id]).fetchone()[0]


def prompts_by_id(db: sqlite_utils.Database, ids: Iterable[int]) -> dict[int, tuple[str, str | None]]:
    """{id: (text, messages_json)} of the prompts among `ids` (storage.rows_by_ids: in chunks)."""
    rows = rows_by_ids(db, "SELECT id, text, messages_json FROM prompts WHERE id IN ({marks})", ids)
    return {row[0]: (row[1], row[2]) for row in rows}


def project_prompt_rows(db: sqlite_utils.Database, project_id: int, ids: Iterable[int]) -> dict[int, sqlite3.Row]:
    """{id: row (id, text, messages_json)} of those of `ids` that are prompts of the project."""
    ids = [int(i) for i in ids]
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = db.execute(f"SELECT id, text, messages_json FROM prompts WHERE project_id = ? AND id IN ({marks})",
                      [project_id, *ids])
    return {row["id"]: row for row in rows}


def prompt_splits(db: sqlite_utils.Database, project_id: int) -> list[tuple[int, str]]:
    """(id, split) of every prompt of the project, oldest first."""
    return [(row[0], row[1]) for row in db.execute("SELECT id, split FROM prompts WHERE project_id = ? ORDER BY id",
                                                    [project_id])]


def reviewed_prompt_ids(db: sqlite_utils.Database, project_id: int) -> list[int]:
    """Ids of the project's prompts that were imported or promoted, not typed by an annotator (TYPED_SPLIT),
    oldest first."""
    return [row[0] for row in db.execute("SELECT id FROM prompts WHERE project_id = ? AND split != ? ORDER BY id",
                                         [project_id, TYPED_SPLIT])]


def reviewed_prompts_with_answers(db: sqlite_utils.Database, project_id: int, model: str) -> list[sqlite3.Row]:
    """Rows (id, text, messages_json, have) of the project's reviewed prompts (see reviewed_prompt_ids), oldest
    first, `have` counting the responses `model` gave each."""
    return db.execute(
        "SELECT p.id, p.text, p.messages_json,"
        " (SELECT COUNT(*) FROM responses r WHERE r.prompt_id = p.id AND r.model = ?) AS have"
        " FROM prompts p WHERE p.project_id = ? AND p.split != ? ORDER BY p.id",
        [model, project_id, TYPED_SPLIT],
    ).fetchall()


def split_texts(db: sqlite_utils.Database, project_id: int, split: str) -> list[str]:
    """The texts of the project's prompts in `split` ('train', 'test' or TYPED_SPLIT), oldest first."""
    return [row[0] for row in db.execute("SELECT text FROM prompts WHERE project_id = ? AND split = ? ORDER BY id",
                                         [project_id, split])]


def split_prompts(db: sqlite_utils.Database, project_id: int, split: str) -> list[str | list[dict]]:
    """The project's prompts in `split`, oldest first: the text, or the conversation for a chat prompt."""
    rows = db.execute("SELECT text, messages_json FROM prompts WHERE project_id = ? AND split = ? ORDER BY id",
                      [project_id, split]).fetchall()
    return [json.loads(row[1]) if row[1] else row[0] for row in rows]


def prompt_column_values(db: sqlite_utils.Database, project_id: int, column: Literal["split", "source"]) -> list[str]:
    """The distinct values of the column among the project's prompts, sorted."""
    if column not in ("split", "source"):
        raise ValueError(f"not a prompts column to list: {column!r}")
    return [row[0] for row in db.execute(f"SELECT DISTINCT {column} FROM prompts WHERE project_id = ? ORDER BY {column}",
                                         [project_id])]


def has_heldout(db: sqlite_utils.Database, project_id: int) -> bool:
    """Whether the project holds any prompt out of training (split 'test')."""
    return db.execute("SELECT 1 FROM prompts WHERE project_id = ? AND split = 'test' LIMIT 1",
                      [project_id]).fetchone() is not None


def last_import_prompt_ids(db: sqlite_utils.Database, project: str = "default") -> list[int]:
    """The prompts of the project's latest import: the newest prompts that share the newest prompt's source.

    An import inserts its prompts together under one source (the file name), so the trailing run of ids with
    that source is the batch just uploaded (duplicates of earlier prompts are skipped on import, not re-added).
    """
    project_id = get_project(db, project).id
    newest = db.execute("SELECT id, source FROM prompts WHERE project_id = ? ORDER BY id DESC LIMIT 1",
                        [project_id]).fetchone()
    if newest is None:
        return []
    before = db.execute("SELECT MAX(id) FROM prompts WHERE project_id = ? AND source != ?",
                        [project_id, newest["source"]]).fetchone()[0] or 0
    return [row[0] for row in db.execute(
        "SELECT id FROM prompts WHERE project_id = ? AND source = ? AND id > ? ORDER BY id",
        [project_id, newest["source"], before])]


# ---- writes -------------------------------------------------------------------------------------------------

def hold_out(db: sqlite_utils.Database, prompt_ids: Iterable[int]) -> None:
    """Move prompts to split 'test' (held out of training, used by evaluation), inside the caller's transaction."""
    db.conn.executemany("UPDATE prompts SET split = 'test' WHERE id = ?", [(int(i),) for i in prompt_ids])


def _store(db: sqlite_utils.Database, project: str, prompts: list[PromptRecord], source: str,
           test: set[int] | frozenset[int] = frozenset()) -> ImportResult:
    """Insert in one transaction; the prompts at the indices in `test` go to split 'test', the rest 'train'.
    An existing identical prompt is left as it is (split included)."""
    project_id = get_project(db, project).id
    added = 0
    with write_transaction(db):
        for index, prompt in enumerate(prompts):
            prompt_id, created = insert_prompt(db, project_id, prompt, source)
            if created and index in test:
                hold_out(db, [prompt_id])
            added += created
    return ImportResult(added=added, duplicates=len(prompts) - added)


def import_prompts(
    db: sqlite_utils.Database, path: str | Path, project: str = "default", source: str | None = None
) -> ImportResult:
    """Import every prompt of a file or saved datasets folder (see module docstring). Writes nothing on error."""
    get_project(db, project)  # an unknown project fails before the file is read
    prompts = [parse_prompt(where, record) for where, record in read_records(path, txt_field="prompt")]
    if not prompts:
        raise InputError("no prompts found", file=str(path))
    return _store(db, project, prompts, source if source is not None else Path(path).name)


def add_prompts(db: sqlite_utils.Database, texts: Iterable[str], project: str = "default", source: str = "") -> ImportResult:
    """Plain-text prompts from code or a text box; the same checks and dedupe as a file import."""
    prompts = []
    for number, text in enumerate(texts, start=1):
        where = Where("prompts", number, unit="row")
        if not isinstance(text, str):
            raise where.error(f"must be a string, got {type(text).__name__}", "prompt")
        prompts.append(PromptRecord(check_text(where, text, "prompt"), None))
    return _store(db, project, prompts, source)


def shipped_heldout(line_index: int) -> bool:
    """Whether the shipped prompt on 0-based line `line_index` is held out: every fifth line (4, 9, ...),
    27 of 135. Fixed, not drawn at random, so every install, run and benchmark is measured on the same
    prompts and none of them is ever trained on."""
    return line_index % 5 == 4


# The shipped task is the seeds' IMDB one: the model continues the opening of a movie review, and a good
# continuation is a positive one. Annotators read this beside the shipped prompts.
SHIPPED_GUIDELINES = {
    "rating": (
        "Each prompt is the **opening of a movie review**; the answer is the model's **continuation** of it. "
        "Score the continuation: the more **positive about the film** it is, while reading as a fluent, on-topic "
        "part of the same review, the higher. Skip what you cannot judge."
    ),
    "ranking": (
        "Each prompt is the **opening of a movie review**; every answer is a **continuation** of it. Order them "
        "from the most **positive about the film** (fluent and on topic) to the least. Give two the same rank only "
        "when you truly cannot choose; skip what you cannot judge."
    ),
}


def import_shipped_prompts(db: sqlite_utils.Database, project: str = "default") -> ImportResult:
    """The movie-review openings shipped in labeler/data/ (the IMDB "write a positive review" task), with a
    fixed held-out set in split 'test' (`shipped_heldout`) for evaluation.

    A project that has no prompts yet becomes the movie task: prompt format 'continue' (the model continues
    the review, as the guidelines say; through the chat template it would answer the opening as a message)
    and, where its guidelines are still the defaults, SHIPPED_GUIDELINES. A project that already has prompts
    keeps its settings."""
    current = get_project(db, project)
    records = list(read_records(SHIPPED_PROMPTS, txt_field="prompt"))
    prompts = [parse_prompt(where, record) for where, record in records]
    test = {i for i, (where, _) in enumerate(records) if shipped_heldout(where.number - 1)}
    fresh = db.execute("SELECT COUNT(*) FROM prompts WHERE project_id = ?", [current.id]).fetchone()[0] == 0
    result = _store(db, project, prompts, "shipped:movie_prompts", test)
    if fresh:
        update_project(db, project, prompt_format="continue",
                       guidelines=current.guidelines or SHIPPED_GUIDELINES["rating"],
                       ranking_guidelines=current.ranking_guidelines or SHIPPED_GUIDELINES["ranking"])
    return result


def count_prompts(db: sqlite_utils.Database, project: str = "default") -> int:
    project_id = get_project(db, project).id
    return db.execute("SELECT COUNT(*) FROM prompts WHERE project_id = ?", [project_id]).fetchone()[0]


def list_prompts(db: sqlite_utils.Database, project: str = "default", limit: int = 100, offset: int = 0) -> list[dict]:
    """Prompts oldest first, with their conversation (or None) and how many responses each has."""
    project_id = get_project(db, project).id
    rows = db.execute(
        "SELECT p.id, p.text, p.messages_json, p.source, p.split, p.created_at,"
        " (SELECT COUNT(*) FROM responses r WHERE r.prompt_id = p.id) AS responses"
        " FROM prompts p WHERE p.project_id = ? ORDER BY p.id LIMIT ? OFFSET ?",
        [project_id, limit, offset],
    ).fetchall()
    return [
        {
            "id": row["id"],
            "text": row["text"],
            "messages": json.loads(row["messages_json"]) if row["messages_json"] else None,
            "source": row["source"],
            "split": row["split"],
            "created_at": row["created_at"],
            "responses": row["responses"],
        }
        for row in rows
    ]
