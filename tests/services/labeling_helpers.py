"""Setup helpers shared by the labeling, quality, concurrency and training tests (plain SQL for
prompts/responses, so these tests do not depend on the prompt-import service)."""
from __future__ import annotations

import hashlib

from labeler.services.data import accounts, labeling, projects

PASSWORD = "correct horse battery"
# The two answers of every prompt add_ranked_pairs makes: clear sentiment, so a reward learns the order.
GOOD, BAD = "a truly wonderful, moving film", "a dull and boring mess"


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


def add_ranked_pairs(db, n_prompts: int, *, first: int = 0, rate: bool = False, annotator: str = "ann",
                     project: str = "default") -> None:
    """Prompts "Review {i}: this film was" (i from `first`) with a GOOD and a BAD answer each; `annotator` (an
    existing user) ranks GOOD first on every open ranking item and, with `rate`, rates GOOD 7 and BAD 2."""
    project_id = projects.get_project(db, project).id
    for i in range(first, first + n_prompts):
        text = f"Review {i}: this film was"
        prompt_id = db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (?, ?, ?)",
                               [project_id, text, hashlib.sha256(text.encode()).hexdigest()]).lastrowid
        for answer in (GOOD, BAD):
            db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (?, ?, 'm')", [prompt_id, f"{answer} #{i}"])
    labeling.create_items(db, project, ranking_size=2, kinds=("ranking", "rating") if rate else ("ranking",))
    while (item := labeling.next_item(db, project, annotator, "ranking")) is not None:
        good, bad = sorted(item.responses, key=lambda r: BAD in r["text"])  # shown shuffled
        labeling.submit_ranking(db, project, annotator, item.item_id, [[good["id"]], [bad["id"]]])
    while rate and (item := labeling.next_item(db, project, annotator, "rating")) is not None:
        labeling.submit_rating(db, project, annotator, item.item_id, 7 if GOOD in item.responses[0]["text"] else 2)


def rating_items(db, project: str = "default") -> list[int]:
    """Ids of the project's rating items, oldest first."""
    project_id = projects.get_project(db, project).id
    return [row[0] for row in db.execute(
        "SELECT id FROM items WHERE project_id = ? AND kind = 'rating' ORDER BY id", [project_id]
    ).fetchall()]
