"""A people-rewarded PPO run's journal (table `ppo_steps`): after every step, the batch it trained on (each
answer's prompt, text, sampled token ids and the reward people gave it) and the scored answers left waiting for the
next step, with the rollout stream's position. A row is a few kB, written in one transaction every step, so the
weights and optimizer state (hundreds of MB to tens of GB) need be written only now and then
(stages.checkpoint_due): a resumed run loads its newest weights checkpoint and trains the steps journalled after
it again on the same labelled answers (runners/ppo.py `replay_journal`). Nothing a person labelled is lost, nor
asked for twice.

People's labels themselves stay where they always were (`ratings`, `rankings` on the run's items); the journal holds
which answers each step used and the rewards they mapped to then.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import sqlite_utils

from storage import write_transaction


@dataclass(frozen=True)
class JournalStep:
    step: int
    position: int  # the rollout stream's resume position after the step
    batch: list[dict]  # prompt, answer, response (token ids), score: what the step trained on, in order
    waiting: list[dict]  # the same for scored answers left for the next step


def record_step(db: sqlite_utils.Database, run_id: int, step: int, position: int, batch: list[dict],
                waiting: list[dict]) -> None:
    """Journal a completed step (a step trained again after a resume replaces its row)."""
    with write_transaction(db):
        db.execute("INSERT OR REPLACE INTO ppo_steps (run_id, step, position, batch_json, waiting_json) "
                   "VALUES (?, ?, ?, ?, ?)",
                   [int(run_id), int(step), int(position), json.dumps(batch, ensure_ascii=False),
                    json.dumps(waiting, ensure_ascii=False)])


def steps_after(db: sqlite_utils.Database, run_id: int, step: int) -> list[JournalStep]:
    """The run's journalled steps after `step`, in order."""
    rows = db.execute("SELECT step, position, batch_json, waiting_json FROM ppo_steps WHERE run_id = ? AND step > ? "
                      "ORDER BY step", [int(run_id), int(step)]).fetchall()
    return [JournalStep(row["step"], row["position"], json.loads(row["batch_json"]), json.loads(row["waiting_json"]))
            for row in rows]


def journal_bytes(db: sqlite_utils.Database, run_id: int) -> int:
    """Bytes of the run's journal rows' JSON (what a step writes, summed)."""
    row = db.execute("SELECT COALESCE(SUM(LENGTH(batch_json) + LENGTH(waiting_json)), 0) FROM ppo_steps "
                     "WHERE run_id = ?", [int(run_id)]).fetchone()
    return int(row[0])
