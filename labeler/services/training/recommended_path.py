"""Which path from rankings to a tuned model the app recommends for a project: DPO, or a reward model then PPO.

The rule is a pure function of a project's facts (recommend), so the Train tab's line, `rlhf-studio projects
recommend` and docs/YOUR_TASK.md say the same thing; project_facts reads those facts from the database.

The figures behind it (a walkthrough of a team's own task, 2026-12-06, docs/YOUR_TASK.md: a chat project of 70
prompts, 63 rankings of 4 answers at 128 tokens, on 2 CPU cores with bf16, the machine shared): DPO at its defaults took
14 min including its evaluation and won 88% against the base by the task's judge; a reward model (three passes) then PPO
at its defaults took 65 min and won 67%. bench/own_task.py's two example tasks (~80 rankings, ~480 pairs) gave DPO
73-79% and a scaled PPO from the three-pass reward model 76-83%: level within seeds, at a multiple of the time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import sqlite_utils

from labeler.services.serving import inference
from labeler.services.training import stages
from labeler.services.settings.durations import format_duration
from labeler.services.settings.job_settings import JobConfig
from labeler.services.data.projects import get_project
from labeler.services.data.prompts import split_prompts

# From this many rankings, on a GPU, a reward model then PPO is recommended. Not measured: the walkthrough had 63
# rankings (DPO stronger) and the bench ~80 (the two level); a reward model learns a judge from a few hundred pairs
# poorly (bench/reward_vs_judge.py: 67-84% of the judge's held-out pairs ordered alike at ~300 pairs), so the switch
# waits for several times those label counts.
MANY_RANKINGS = 500
# The target the defaults are held to: from rankings to an evaluated model on a CPU within half an hour.
CPU_BUDGET_MINUTES = 30.0
# The walkthrough's measured figures, quoted in the reasons.
MEASURED = ("a 70-prompt project with 63 rankings, on 2 CPU cores: DPO 14 min and 88% won against the base, "
            "a reward model then PPO 65 min and 67%")

Path = Literal["dpo", "rm_ppo"]
LABELS = {"dpo": "DPO", "rm_ppo": "reward model, then PPO"}


@dataclass(frozen=True)
class PathFacts:
    rankings: int  # people's rankings in the project
    pairs: int  # the preference pairs they make (what DPO and the reward model train on)
    training_prompts: int
    device: Literal["cpu", "gpu"]
    dpo_minutes: float | None = None  # the estimated wall time of each path here, when measured
    rm_ppo_minutes: float | None = None
    reusable_reward_model: bool = False  # the team wants a reward model to keep (to score, or label online with)

    def __post_init__(self):
        if self.device not in ("cpu", "gpu"):
            raise ValueError(f"device={self.device!r}: cpu or gpu")
        for name in ("rankings", "pairs", "training_prompts"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r}: must not be negative")


@dataclass(frozen=True)
class Recommendation:
    path: Path
    reason: str  # one sentence a person reads
    minutes: str = ""  # the estimates, when known, as a clause

    @property
    def label(self) -> str:
        return LABELS[self.path]

    def line(self) -> str:
        """The one line the Train tab and the CLI show."""
        return f"Recommended path: **{self.label}**. {self.reason}" + (f" {self.minutes}" if self.minutes else "")


def recommend(facts: PathFacts) -> Recommendation:
    """DPO unless a reward model is wanted for itself, or there are MANY_RANKINGS rankings and a GPU."""
    if facts.reusable_reward_model:
        slower = (f" On a CPU expect several times DPO's wait ({MEASURED})." if facts.device == "cpu" else "")
        return _with_minutes(facts, Recommendation(
            "rm_ppo", "You want a reward model to keep (to score answers, or to learn from labels given while a run "
                      "trains), which DPO does not make." + slower))
    if facts.pairs == 0:
        return _with_minutes(facts, Recommendation(
            "dpo", "There are no ranked pairs yet: rank answers first (both paths learn from rankings); DPO is then "
                   "the quickest first run."))
    if facts.device == "cpu":
        return _with_minutes(facts, Recommendation(
            "dpo", f"On a CPU, DPO is the faster path and was the stronger one ({MEASURED})."))
    if facts.rankings < MANY_RANKINGS:
        return _with_minutes(facts, Recommendation(
            "dpo", f"With {facts.rankings} rankings (under {MANY_RANKINGS}) a reward model is a weak judge; DPO learns "
                   f"from the same pairs directly, faster and, on the example project, stronger ({MEASURED})."))
    return _with_minutes(facts, Recommendation(
        "rm_ppo", f"With {facts.rankings} rankings and a GPU, a reward model learns a judge worth keeping and PPO "
                  "samples fast; DPO stays the quicker check."))


def _with_minutes(facts: PathFacts, recommendation: Recommendation) -> Recommendation:
    """The estimates when known, and a warning when the recommended path's CPU run passes CPU_BUDGET_MINUTES."""
    known = [(LABELS[path], minutes) for path, minutes in (("dpo", facts.dpo_minutes), ("rm_ppo", facts.rm_ppo_minutes))
             if minutes is not None]
    if not known:
        return recommendation
    text = "Estimated here: " + ", ".join(f"{label} about {format_duration(minutes * 60)}" for label, minutes in known) + "."
    chosen = facts.dpo_minutes if recommendation.path == "dpo" else facts.rm_ppo_minutes
    if facts.device == "cpu" and chosen is not None and chosen > CPU_BUDGET_MINUTES:
        text += " That is over the half hour a CPU run should take: fewer steps or shorter answers would fit it."
    return Recommendation(recommendation.path, recommendation.reason, text)


# ---- the facts of a project ---------------------------------------------------------------------------------

def project_facts(db: sqlite_utils.Database, project: str, device: str | None = None, **minutes) -> PathFacts:
    """A project's PathFacts: its rankings, the pairs DPO would train on (at the job's default filters), its
    training prompts, and this host's device (inference.host_device, unless given). `minutes`: dpo_minutes,
    rm_ppo_minutes, reusable_reward_model."""
    project_id = get_project(db, project).id
    rankings = db.execute("SELECT COUNT(*) FROM rankings JOIN prompts ON prompts.id = rankings.prompt_id "
                          "WHERE prompts.project_id = ?", [project_id]).fetchone()[0]
    pairs = len(stages.dpo_rows(db, project, JobConfig()))
    if device is None:
        device = "gpu" if inference.host_device() == "cuda" else "cpu"
    return PathFacts(rankings=rankings, pairs=pairs, training_prompts=len(split_prompts(db, project_id, "train")),
                     device=device, **minutes)


def project_line(db: sqlite_utils.Database, project: str, device: str | None = None) -> str:
    """The Train tab's and the CLI's line for a project, with the facts it rests on."""
    facts = project_facts(db, project, device)
    where = "a GPU" if facts.device == "gpu" else "a CPU"
    return (f"{recommend(facts).line()} ({facts.rankings} rankings, {facts.pairs} pairs, {facts.training_prompts} "
            f"training prompts, {where}.)")
