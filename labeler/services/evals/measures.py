"""A project's measure: how its runs are judged on the held-out prompts, by the team's notion of "better".

    vader | vader-with-prompt   VADER sentiment (the shipped movie-review task's measure)
    rm:NAME                     a registered reward model's score
    module:function             a Python function (prompts, answers) -> one float per answer
    people                      people compare the base's and the tuned model's answers, blind, in the Rank tab
    "" (the default)            the newest reward model trained on the project; none while it has none

The measure scores the answers of a run's model and of its base to the same held-out prompts; the evaluation
reports the mean score and the model's win rate against its base (labeler/services/evals/evaluation.py). A reward model
that a run optimised is an optimistic judge of it: `judge_note` says so on the run's page.
"""
from __future__ import annotations

import sqlite_utils

from labeler.services.serving import models
from labeler.services.settings import reward_spec
from labeler.errors import InputError
from labeler.services.data.projects import Project, get_project, update_project

PEOPLE = "people"
GRAMMAR = "rm:NAME, vader, vader-with-prompt, module:function or people (blank: the newest reward model)"
OPTIMISTIC = "judged by the reward model it was trained on: optimistic"


def check_measure(db: sqlite_utils.Database, spec: str) -> str:
    """The measure, stripped, once what it names exists: a registered reward model, an importable function. An
    InputError names what is missing and what there is."""
    spec = str(spec or "").strip()
    if spec in ("", PEOPLE, *reward_spec.BUILTIN_FUNCTIONS):
        return spec
    parsed = reward_spec.parse(spec, field="measure")
    if parsed.source == "rm" and parsed.model:
        row = next((m for m in models.list_models(db) if m["name"] == parsed.model), None)
        if row is None or row["kind"] != "reward":
            names = ", ".join(m["name"] for m in models.list_models(db, kind="reward")) or "none registered"
            raise InputError(f"no reward model named {parsed.model!r} (reward models: {names})", field="measure")
        return f"rm:{parsed.model}"
    if parsed.source == "function":
        reward_spec.import_function(parsed.function, "measure", "measure")
        return parsed.function
    raise InputError(f"measure {spec!r}: use {GRAMMAR}", field="measure")


def set_measure(db: sqlite_utils.Database, project: str, spec: str) -> Project:
    """Set the project's measure after check_measure."""
    return update_project(db, project, measure=check_measure(db, spec))


def newest_project_reward_model(db: sqlite_utils.Database, project_id: int) -> str | None:
    """The newest reward model trained by a run of the project, or None."""
    return models.newest_of_project(db, "reward", project_id)


def resolve_measure(db: sqlite_utils.Database, project: str) -> str:
    """The measure in force: the project's own, else 'rm:<newest reward model of the project>', else ''."""
    current = get_project(db, project)
    if current.measure:
        return current.measure
    newest = newest_project_reward_model(db, current.id)
    return f"rm:{newest}" if newest else ""


def describe(measure: str) -> str:
    """A measure in words, for the run's page and the report."""
    if not measure:
        return "no measure (set one: projects set --measure, or train a reward model)"
    if measure == PEOPLE:
        return "people's blind comparisons"
    if measure.startswith("rm:"):
        return f"reward model {measure[3:]}"
    if measure in reward_spec.BUILTIN_FUNCTIONS:
        return f"{measure} (sentiment)"
    return f"function {measure}"


def trained_reward_model(job, newest_at_launch: str | None) -> str | None:
    """The reward model a policy run optimised: its reward_model, or the newest one when it named none."""
    if getattr(job, "reward", None) not in ("rm", "mix"):
        return None
    return job.reward_model or newest_at_launch


def judge_note(measure: str, job, newest_at_launch: str | None = None) -> str:
    """OPTIMISTIC when the measure is the reward model the run was trained on (or warm-started from), else ''."""
    trained = trained_reward_model(job, newest_at_launch)
    return OPTIMISTIC if trained and measure == f"rm:{trained}" else ""
