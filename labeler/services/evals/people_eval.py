"""The measure `people`: a finished run judged by the project's own annotators, blind.

For each held-out prompt, the base's and the tuned model's first answers from the run's evaluation become one
ranking item of two (the Rank tab shows answers in an order shuffled per person and never the model), queued
ahead of ordinary items. As people rank them, `people_win_rate` reads the run's win rate against its base: a
pair where the tuned answer is ranked above the base's is a win, a tie half.

The answers are stored as responses with source EVALUATION_SOURCE and the run's id; they belong to held-out
prompts, so no export for training reads them.

A base's evaluation answers are sampled once per settings and reused by every run on that base, so a person who
judged an earlier run's pairs would recognise the base's answer: a pair takes the first of the base's answers to
the prompt that no earlier run's pair showed (`unseen_base_answer`), and a prompt whose base answers were all
shown gets no pair.
"""
from __future__ import annotations

import dataclasses

import sqlite_utils

from labeler.services.data import labeling
from labeler.services.data.projects import get_project
from labeler.services.data.responses import insert_response
from rlhf.stats import WinRate, wilson_interval
from storage import write_transaction

EVALUATION_SOURCE = "evaluation"
# Ahead of ordinary items (0), behind a training run's own items, which a run waits on.
PEOPLE_EVAL_PRIORITY = 5


def queue_comparisons(db: sqlite_utils.Database, project: str, run_id: int, base_model: str, model: str,
                      base_samples: list[dict], model_samples: list[dict], samples_per_prompt: int) -> int:
    """One blind pairwise item per held-out prompt (base's answer vs the model's, the first of each), for people
    to rank. The evaluations' samples are grouped by prompt in the order of the project's held-out prompts.
    Returns how many items were queued (none twice for the same run)."""
    proj = get_project(db, project)
    prompt_ids = [row[0] for row in db.execute(
        "SELECT id FROM prompts WHERE project_id = ? AND split = 'test' ORDER BY id", [proj.id])]
    queued = 0
    with write_transaction(db):
        if db.execute("SELECT 1 FROM responses WHERE run_id = ? AND source = ? LIMIT 1",
                      [run_id, EVALUATION_SOURCE]).fetchone():
            return 0
        for index, prompt_id in enumerate(prompt_ids):
            first = index * samples_per_prompt
            if first >= min(len(base_samples), len(model_samples)):
                break
            base_answer = unseen_base_answer(db, prompt_id, base_model,
                                             [row["answer"] for row in base_samples[first:first + samples_per_prompt]])
            if base_answer is None:
                continue
            ids = [insert_response(db, prompt_id, answer, model=name, source=EVALUATION_SOURCE, run_id=run_id,
                                   server_generated=True)
                   for name, answer in ((base_model, base_answer), (model, model_samples[first]["answer"]))]
            queued += labeling.insert_item(db, proj.id, "ranking", prompt_id, ids, priority=PEOPLE_EVAL_PRIORITY,
                                           if_new=True) is not None
    return queued


def unseen_base_answer(db: sqlite_utils.Database, prompt_id: int, base_model: str, answers: list[str]) -> str | None:
    """The first of `answers` (the base's to this prompt) that no earlier blind pair showed, or None."""
    shown = {row[0] for row in db.execute(
        "SELECT text FROM responses WHERE prompt_id = ? AND model = ? AND source = ?",
        [prompt_id, base_model, EVALUATION_SOURCE])}
    return next((answer for answer in answers if answer not in shown), None)


def with_people_verdict(db: sqlite_utils.Database, run_id: int, after):
    """A run's evaluation (evaluation.Evaluation, or None) with people's win rate so far in its metrics
    (eval/win_rate, eval/win_low, eval/win_high) when people judge it: the Train tab's win-rate column, chart and
    interval then follow the Rank tab as people label. Unchanged for any other measure or before a ranking."""
    if after is None or after.settings.get("reward") != "people":
        return after
    result = people_win_rate(db, run_id, after.model)
    if result is None:
        return after
    metrics = {**after.metrics, "eval/win_rate": result.rate, "eval/win_low": result.low, "eval/win_high": result.high}
    return dataclasses.replace(after, metrics=metrics)


def pair_outcome(order: list[list[int]], model_response: int, base_response: int) -> float | None:
    """1 when the model's answer is ranked above the base's, 0.5 when tied, 0 below; None when either is missing
    (a ranking lists tied groups, best first)."""
    place = {response: rank for rank, group in enumerate(order) for response in group}
    if model_response not in place or base_response not in place:
        return None
    if place[model_response] == place[base_response]:
        return 0.5
    return 1.0 if place[model_response] < place[base_response] else 0.0


def people_win_rate(db: sqlite_utils.Database, run_id: int, model: str):
    """rlhf.stats.WinRate of the run's model against its base by people's rankings so far (several people on
    one pair each count), or None before the first ranking."""
    rows = db.execute("SELECT id, prompt_id, model FROM responses WHERE run_id = ? AND source = ? ORDER BY id",
                      [run_id, EVALUATION_SOURCE]).fetchall()
    pairs: dict[int, dict[str, int]] = {}
    for row in rows:
        pairs.setdefault(row["prompt_id"], {})["model" if row["model"] == model else "base"] = row["id"]
    items = {labeling.find_item(db, _project_id(db, run_id), "ranking", [p["model"], p["base"]]): p
             for p in pairs.values() if len(p) == 2}
    outcomes, prompts = [], set()
    for item_id, orders in labeling.ranking_orders(db, [i for i in items if i is not None]).items():
        for order in orders:
            outcome = pair_outcome(order, items[item_id]["model"], items[item_id]["base"])
            if outcome is not None:
                outcomes.append(outcome)
                prompts.add(item_id)
    if not outcomes:
        return None
    rate = sum(outcomes) / len(outcomes)
    low, high = wilson_interval(rate, len(prompts))
    wins, ties = sum(o == 1.0 for o in outcomes), sum(o == 0.5 for o in outcomes)
    return WinRate(rate, low, high, wins, ties, len(outcomes) - wins - ties, len(prompts))


def _project_id(db: sqlite_utils.Database, run_id: int) -> int:
    return db.execute("SELECT project_id FROM runs WHERE id = ?", [run_id]).fetchone()[0]
