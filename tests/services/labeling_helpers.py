"""Setup helpers shared by the labeling, quality and concurrency tests (plain SQL for prompts/responses,
so these tests do not depend on the prompt-import service)."""
from __future__ import annotations

import hashlib

from labeler.services import accounts, projects

PASSWORD = "correct horse battery"


def make_users(db, *names: str) -> None:
    for name in names:
        accounts.create_user(db, name, PASSWORD)


def set_overlap(db, overlap: int, project: str = "default") -> None:
    projects.update_project(db, project, overlap=overlap)


def add_prompt(db, text: str, n_responses: int, project: str = "default") -> list[int]:
    """A prompt with `n_responses` responses; returns the response ids."""
    project_id = projects.get_project(db, project).id
    cursor = db.execute(
        "INSERT INTO prompts (project_id, text, text_hash) VALUES (?, ?, ?)",
        [project_id, text, hashlib.sha256(text.encode()).hexdigest()],
    )
    prompt_id = cursor.lastrowid
    return [
        db.execute(
            "INSERT INTO responses (prompt_id, text, model) VALUES (?, ?, ?)", [prompt_id, f"{text} / answer {i}", "m"]
        ).lastrowid
        for i in range(n_responses)
    ]


def rating_items(db, project: str = "default") -> list[int]:
    """Ids of the project's rating items, oldest first."""
    project_id = projects.get_project(db, project).id
    return [row[0] for row in db.execute(
        "SELECT id FROM items WHERE project_id = ? AND kind = 'rating' ORDER BY id", [project_id]
    ).fetchall()]
