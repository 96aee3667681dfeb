"""Each criterion's win rate against the base: a run's evaluated answers and its base's, scored by the
reward model trained on each of the project's criteria (`train rm --set criterion=NAME`), compared as the measure's
win rate is (evaluation.win_metrics: every answer against every base answer to the same prompt, Wilson's interval
at the trials the prompts are worth). A run on a weighted sum or under a constraint is judged per criterion: the
constraint held if its criterion's interval reaches 50%, the other criteria improved if theirs lie above it.
"""
from __future__ import annotations

import json
from typing import Callable, Mapping, Sequence

import sqlite_utils

from labeler.services.evals import evaluation
from labeler.errors import InputError
from labeler.services.data.projects import get_project
from labeler.services.labels.questions import criteria

Scorer = Callable[[Sequence, Sequence[str]], Sequence[float]]


def criterion_win_rates(rows: Sequence[dict], base_rows: Sequence[dict], samples: int,
                        scorers: Mapping[str, Scorer]) -> dict[str, dict[str, float]]:
    """{criterion: evaluation.win_metrics} of a model's evaluated answers (`rows`: prompt, answer) against its
    base's, in the same prompt order (`samples` answers a prompt), each criterion scoring both with its scorer."""
    if len(rows) != len(base_rows):
        raise InputError(f"{len(rows)} answers against {len(base_rows)} of the base: evaluate both with the same "
                         "settings", field="evaluation")
    result = {}
    for name, score in scorers.items():
        scored = []
        for answers in (rows, base_rows):
            scores = [float(s) for s in score([r["prompt"] for r in answers], [r["answer"] for r in answers])]
            if len(scores) != len(answers):
                raise InputError(f"criterion {name!r} gave {len(scores)} scores for {len(answers)} answers",
                                 field="criterion")
            scored.append([{**row, "reward": s} for row, s in zip(answers, scores)])
        result[name] = evaluation.win_metrics(scored[0], scored[1], samples)
    return result


def criterion_models(db: sqlite_utils.Database, project: str = "default") -> dict[str, str]:
    """{criterion: the registered reward model of the newest reward-model run trained on it} for the project's
    criteria that have one."""
    proj = get_project(db, project)
    names = {q.name for q in criteria(db, project, include_retired=True)[1:]}
    found: dict[str, str] = {}
    for model, config in db.execute(
            "SELECT m.name, r.config_json FROM models m JOIN runs r ON r.id = m.run_id WHERE r.project_id = ?"
            " AND r.stage = 'rm' AND m.kind = 'reward' ORDER BY r.id DESC", [proj.id]).fetchall():
        criterion = json.loads(config or "{}").get("job", {}).get("criterion", "")
        if criterion in names and criterion not in found:
            found[criterion] = model
    return found


def run_criterion_wins(db: sqlite_utils.Database, run_id: int, project: str) -> dict[str, dict[str, float]]:
    """criterion_win_rates of a run's newest evaluation against its base's, for every criterion with a trained
    reward model ({} when there is no such criterion or no evaluation of both)."""
    models = criterion_models(db, project)
    before, after = evaluation.run_comparison(db, run_id)
    if not models or before is None or after is None:
        return {}
    scorers = {name: evaluation.reward_function(db, f"rm:{model}") for name, model in models.items()}
    return criterion_win_rates(after.samples, before.samples, int(after.settings.get("samples", 1)), scorers)


def win_lines(wins: Mapping[str, Mapping[str, float]]) -> list[str]:
    """One line a criterion: its win rate against the base with the 95% interval, or why there is none."""
    lines = []
    for name, metrics in wins.items():
        if "eval/win_rate" not in metrics:
            lines.append(f"{name}: no win rate (no scored answers)")
            continue
        lines.append(f"{name}: {metrics['eval/win_rate']:.0%} against the base, 95% interval "
                     f"{metrics['eval/win_low']:.0%} to {metrics['eval/win_high']:.0%}")
    return lines
