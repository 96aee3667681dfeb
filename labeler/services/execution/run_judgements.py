"""An online run's judgements (table run_judgements): each pair of answers the run had judged, who decided it, and the
summary its page and `runs show` print: how many pairs people judged, how many the model, and how often the model
agreed with people on the pairs both judged.

A judgement holds the pair's texts and up to two verdicts, each 0 (the first answer better), 1 (the second) or -1 (a
tie): people's (their ranking of the pair in the Rank tab; None when nobody was asked or nobody ranked it in time) and
the model's (the reward model's, the online reward model's or a function's; None where it gave none). `judged_by` says
whose verdict the run trained on: 'people', 'model', or 'none' (two identical answers, or a pair people were asked
about and did not rank in time: left out of the loss). `verdict` is that verdict (-1 for 'none').

Agreement counts only pairs both judged strictly (neither said "a tie"): a tie is neither agreement nor disagreement
about which answer is better. The summary gives the count it is measured on, so 1 of 1 is not mistaken for a rate.

Written by labeler/services/training/runners/online_dpo.py as each batch is judged (one transaction a batch), so a run
that fails or is cancelled keeps every judgement made before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import sqlite_utils

from labeler.services.data import accounts
from labeler.errors import InputError
from labeler.services.settings.training_stages.online_dpo import judge_spec
from storage import write_transaction

JUDGED_BY = ("people", "model", "none")
VERDICTS = (-1, 0, 1)


@dataclass(frozen=True)
class Judgement:
    step: int
    prompt: str
    first: str
    second: str
    judged_by: str  # whose verdict trained: people, model, none
    verdict: int  # 0 the first answer better, 1 the second, -1 a tie or no verdict
    people: int | None = None
    model: int | None = None
    item_id: int | None = None  # the Rank item people saw

    def __post_init__(self):
        if self.judged_by not in JUDGED_BY:
            raise ValueError(f"judged_by={self.judged_by!r}: one of {', '.join(JUDGED_BY)}")
        for name in ("verdict", "people", "model"):
            value = getattr(self, name)
            if not (value is None and name != "verdict") and value not in VERDICTS:
                raise ValueError(f"{name}={value!r}: a verdict is 0, 1 or -1")


_COLUMNS = ("step", "prompt", "first", "second", "judged_by", "verdict", "people", "model", "item_id")


def record_judgements(db: sqlite_utils.Database, run_id: int, judgements: Iterable[Judgement]) -> int:
    """Store a batch's judgements in one transaction; how many."""
    rows = [[run_id, *(getattr(j, name) for name in _COLUMNS)] for j in judgements]
    if rows:
        with write_transaction(db):
            db.conn.executemany(f"INSERT INTO run_judgements (run_id, {', '.join(_COLUMNS)})"
                                f" VALUES (?, {', '.join('?' * len(_COLUMNS))})", rows)
    return len(rows)


def run_judgements(db: sqlite_utils.Database, run_id: int) -> list[Judgement]:
    """The run's judgements, in the order they were made."""
    rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM run_judgements WHERE run_id = ? ORDER BY id", [run_id])
    return [Judgement(*row) for row in rows.fetchall()]


@dataclass(frozen=True)
class JudgeSummary:
    pairs: int  # judgements recorded
    by_people: int  # pairs whose verdict came from people (a tie they gave included)
    by_model: int  # pairs the model decided
    undecided: int  # identical answers, or asked and not ranked in time
    both: int  # pairs with a verdict from people and one from the model
    compared: int  # of those, the ones neither called a tie
    agreed: int  # of those, the ones where the model picked the answer people picked

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.compared if self.compared else None


def summarize(judgements: Sequence[Judgement]) -> JudgeSummary:
    """Counts and agreement over judgements (module docstring)."""
    both = [j for j in judgements if j.people is not None and j.model is not None]
    compared = [j for j in both if j.people != -1 and j.model != -1]
    return JudgeSummary(
        pairs=len(judgements),
        by_people=sum(j.judged_by == "people" for j in judgements),
        by_model=sum(j.judged_by == "model" for j in judgements),
        undecided=sum(j.judged_by == "none" for j in judgements),
        both=len(both), compared=len(compared), agreed=sum(j.people == j.model for j in compared),
    )


def judge_summary(db: sqlite_utils.Database, run_id: int) -> JudgeSummary | None:
    """The summary of a run's judgements, or None when it recorded none (another stage, or before its first batch)."""
    judgements = run_judgements(db, run_id)
    return summarize(judgements) if judgements else None


def summary_lines(summary: JudgeSummary) -> list[str]:
    """The summary in plain sentences (the run's page and `runs show`)."""
    lines = [f"{summary.pairs} pairs judged: {summary.by_people} by people, {summary.by_model} by the model, "
             f"{summary.undecided} left out (identical answers, or not ranked in time)"]
    if summary.compared:
        lines.append(f"the model agreed with people on {summary.agreed} of the {summary.compared} pairs both judged "
                     f"({summary.agreement:.0%}; {summary.both - summary.compared} more that one of them called a tie)")
    elif summary.both:
        lines.append(f"people and the model both judged {summary.both} pairs, each time with a tie on one side: "
                     "no agreement to measure yet")
    else:
        lines.append("no pair was judged by both people and the model: no agreement to measure")
    return lines


def people_judge(judge: str) -> bool:
    """Whether a `judge` setting asks people (people, human, mix, mix:NAME)."""
    return judge_spec(judge).source in ("human", "mix")


def require_annotators(db: sqlite_utils.Database, judge: str) -> None:
    """InputError naming the fix when `judge` asks people and nobody can rank: no active annotator account."""
    if not people_judge(judge):
        return
    if not any(user.active and user.role == "annotator" for user in accounts.list_users(db)):
        raise InputError(f"judge={judge}: there are no annotator accounts to rank the pairs; add one with "
                         "`rlhf-studio users add NAME` (or the Admin tab) first", field="judge")


__all__ = ["JUDGED_BY", "JudgeSummary", "Judgement", "judge_summary", "people_judge", "record_judgements",
           "require_annotators", "run_judgements", "summarize", "summary_lines"]
