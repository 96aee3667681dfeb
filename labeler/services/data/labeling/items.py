"""Creating items: a rating item per answer, and ranking groups of a prompt's answers (labeling's package
docstring has the queue rules)."""
from __future__ import annotations

import json
import math
from collections.abc import Sequence

import sqlite_utils

from labeler.errors import InputError
from labeler.services.data.labeling.store import KINDS, check_kind, insert_item
from labeler.services.data.projects import get_project
from labeler.services.data.responses import response_prompts
from storage import write_transaction

# A ranking of K answers gives up to K(K-1)/2 preference pairs for one read of the prompt: 8 answers give 28
# (4 gave 6), and the Rank tab shows one slot per answer up to MAX_RANKING_SIZE (ui/tabs/rank/item_view.py).
MIN_RANKING_SIZE, MAX_RANKING_SIZE = 2, 8


def group_sizes(n: int, ranking_size: int) -> list[int]:
    """Split n responses into ranking groups of 2..ranking_size, as even as possible.

    5 responses with size 4 -> [3, 2] (not [4, 1]: a group of one cannot be ranked). With size 2 an odd
    response is left out and waits for the prompt's next response.
    """
    if n < 2:
        return []
    if ranking_size == 2:
        return [2] * (n // 2)
    groups = math.ceil(n / ranking_size)
    base, extra = divmod(n, groups)
    return [base + 1] * extra + [base] * (groups - extra)


def _ids_in_items(db: sqlite_utils.Database, project_id: int, kind: str) -> set[int]:
    # json_each rather than string matching, so items written by any code path are recognised.
    rows = db.execute(
        "SELECT j.value FROM items i, json_each(i.response_ids_json) j WHERE i.project_id = ? AND i.kind = ?",
        [project_id, kind],
    ).fetchall()
    return {row[0] for row in rows}


def check_ranking_size(ranking_size) -> None:
    """InputError unless `ranking_size` is a whole number of answers a ranking item may hold."""
    if isinstance(ranking_size, bool) or not isinstance(ranking_size, int) or not (
        MIN_RANKING_SIZE <= ranking_size <= MAX_RANKING_SIZE
    ):
        raise InputError(
            f"must be between {MIN_RANKING_SIZE} and {MAX_RANKING_SIZE}, got {ranking_size!r}", field="ranking_size"
        )


def create_items(
    db: sqlite_utils.Database,
    project: str = "default",
    response_ids: Sequence[int] | None = None,
    ranking_size: int = 4,
    *,
    kinds: Sequence[str] = KINDS,
    priority: int = 0,
    run_id: int | None = None,
) -> int:
    """Create the missing items; returns how many were created. Held-out prompts get none: their answers are for
    evaluation (a prompt may become held-out while its answers are being generated).

    Rating items: one per response (of `response_ids`, or of the whole project) that has none.
    Ranking items: for each prompt concerned, its responses not yet in a ranking item join its groups that nobody
    was shown yet and that have room (those are made again with them), in groups of 2..ranking_size. A lone answer
    left over (a prompt topped up from 2 answers to 3 after its pair was ranked) makes a new group with the
    prompt's newest other answers, so every answer reaches a ranking. `priority` and `run_id` mark items a
    training run waits on (PPO with human rewards passes kinds=("rating",), a high priority and its run): those
    hold only the answers named, grouped among themselves.
    """
    for kind in kinds:
        check_kind(kind)
    check_ranking_size(ranking_size)
    created = 0
    with write_transaction(db):
        proj = get_project(db, project)
        prompt_of = response_prompts(db, proj.id)
        wanted = None
        if response_ids is not None:
            wanted = {int(r) for r in response_ids}
            unknown = sorted(wanted - set(prompt_of))
            if unknown:
                raise InputError(f"responses {unknown} are not in project '{proj.name}'", field="response_ids")
        held_out = _heldout_prompt_ids(db, proj.id)
        prompt_of = {r: p for r, p in prompt_of.items() if p not in held_out}
        if wanted is not None:
            wanted &= set(prompt_of)

        def insert(kind: str, prompt_id: int, ids: list[int]) -> int:
            return insert_item(db, proj.id, kind, prompt_id, ids, priority=priority, run_id=run_id, if_new=True) is not None

        if "rating" in kinds:
            rated = _ids_in_items(db, proj.id, "rating")
            for response_id, prompt_id in prompt_of.items():
                if response_id not in rated and (wanted is None or response_id in wanted):
                    created += insert("rating", prompt_id, [response_id])

        if "ranking" in kinds:
            ranked = _ids_in_items(db, proj.id, "ranking")
            # Older unranked responses of a prompt join the new ones: generating one answer at a time
            # must still end up in rankings.
            unranked: dict[int, list[int]] = {}
            answers: dict[int, list[int]] = {}  # every answer of each prompt, oldest first
            for response_id, prompt_id in prompt_of.items():
                answers.setdefault(prompt_id, []).append(response_id)
                if response_id not in ranked:
                    unranked.setdefault(prompt_id, []).append(response_id)
            prompts = sorted({prompt_of[r] for r in wanted} if wanted is not None else set(unranked))
            # Ordinary items only: a run's item holds exactly the answers it waits for.
            ordinary = priority == 0 and run_id is None
            reopenable = _reopenable_groups(db, proj.id, ranking_size) if ordinary else {}
            for prompt_id in prompts:
                free = unranked.get(prompt_id, [])
                if not free:
                    continue
                for item_id, ids in reopenable.get(prompt_id, []):  # made again below, with the new answers
                    db.execute("DELETE FROM items WHERE id = ?", [item_id])
                    free = sorted(free + ids)
                sizes = group_sizes(len(free), ranking_size)
                start = 0
                for size in sizes:
                    created += insert("ranking", prompt_id, free[start : start + size])
                    start += size
                if ordinary and start < len(free):
                    partners = [r for r in reversed(answers[prompt_id]) if r not in free][: ranking_size - (len(free) - start)]
                    if partners:
                        created += insert("ranking", prompt_id, free[start:] + partners)
    return created


def _reopenable_groups(db: sqlite_utils.Database, project_id: int,
                       ranking_size: int) -> dict[int, list[tuple[int, list[int]]]]:
    """{prompt id: [(item id, its answers)]} of the project's ordinary ranking items with room (fewer than
    `ranking_size` answers) that nobody was shown and nobody labelled: a prompt's new answers join them."""
    rows = db.execute(
        "SELECT i.id, i.prompt_id, i.response_ids_json FROM items i WHERE i.project_id = ? AND i.kind = 'ranking'"
        " AND i.run_id IS NULL AND i.priority = 0 AND i.gold_json IS NULL AND json_array_length(i.response_ids_json) < ?"
        " AND NOT EXISTS (SELECT 1 FROM assignments a WHERE a.item_id = i.id)"
        " AND NOT EXISTS (SELECT 1 FROM rankings k WHERE k.item_id = i.id)",
        [project_id, ranking_size]).fetchall()
    found: dict[int, list[tuple[int, list[int]]]] = {}
    for row in rows:
        found.setdefault(row["prompt_id"], []).append((row["id"], [int(r) for r in json.loads(row["response_ids_json"])]))
    return found


def _heldout_prompt_ids(db: sqlite_utils.Database, project_id: int) -> set[int]:
    """Held-out prompts and retired ones (prompts.RETIRED_SPLIT): their answers are not queued."""
    return {row[0] for row in db.execute("SELECT id FROM prompts WHERE project_id = ? AND split IN ('test', 'retired')",
                                         [project_id])}


def requeue_prompts(db: sqlite_utils.Database, project: str, prompt_ids: Sequence[int]) -> None:
    """After prompts changed split (prompts.change_heldout_share, before any label): their unlabelled items go,
    and items are made again for the answers of those now in training (create_items skips held-out prompts)."""
    ids = sorted({int(i) for i in prompt_ids})
    if not ids:
        return
    proj = get_project(db, project)
    with write_transaction(db):
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            db.execute(f"DELETE FROM items WHERE project_id = ? AND run_id IS NULL AND prompt_id IN ({', '.join('?' * len(chunk))})"
                       " AND id NOT IN (SELECT item_id FROM ratings) AND id NOT IN (SELECT item_id FROM rankings WHERE item_id IS NOT NULL)",
                       [proj.id, *chunk])
    create_items(db, project)

