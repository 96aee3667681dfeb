"""A project's measure: how its runs are judged on the held-out prompts, by the team's notion of "better".

    vader | vader-with-prompt   VADER sentiment (the shipped movie-review task's measure)
    rm:NAME                     a registered reward model's score
    module:function             a Python function (prompts, answers) -> one float per answer
    people                      people compare the base's and the tuned model's answers, blind, in the Rank tab
    "" (the default)            decided by `resolve`, in this order:
                                1. people, when someone can judge: an active account has labelled in this project
                                   (`labellers`);
                                2. else the newest reward model trained on the project;
                                3. else, for a run rewarded by a function, that function (its own reward: optimistic);
                                4. else none (no verdict).

People come first because a reward model trained on the same few labels judges the policy it trained
optimistically (the policy learnt to please exactly that model), while people's blind pairs are an independent
judge that exists whenever people do; they cost people's time, but nothing waits on them. `resolve` is the one place
that decides, and `Resolved.words` says what it chose and why, for every place that shows the measure to a person.

The measure scores the answers of a run's model and of its base to the same held-out prompts; the evaluation
reports the mean score and the model's win rate against its base (labeler/services/evals/evaluation.py). A reward model
that a run optimised is an optimistic judge of it: `judge_note` says so on the run's page.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlite_utils

from labeler.services.serving import models
from labeler.services.settings import reward_spec
from labeler.errors import InputError
from labeler.services.data.projects import Project, get_project, update_project

PEOPLE = "people"
GRAMMAR = ("rm:NAME, vader, vader-with-prompt, module:function or people (blank: people's blind comparisons once "
           "someone has labelled the project, else the newest reward model)")
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


def labellers(db: sqlite_utils.Database, project_id: int) -> int:
    """The people who can judge the project's blind pairs: active accounts (either role; every active account may
    label every project, there are no per-project members) with at least one label done in its Rate or Rank queue.
    Imported labels (no account) and arena votes (no queue assignment) do not count, nor a deactivated account
    (the demo's simulated annotator is deactivated when the demo ends): none of them will rank a blind pair."""
    # user_progress.done is kept by triggers on assignments (storage/migrations.py, queue counters): a few rows per
    # account and label kind, so this costs the same at 100k labels as at 10.
    return db.execute("SELECT COUNT(DISTINCT p.user_id) FROM user_progress p JOIN users u ON u.id = p.user_id"
                      " WHERE p.project_id = ? AND p.done > 0 AND u.active = 1", [project_id]).fetchone()[0]


@dataclass(frozen=True)
class Resolved:
    """The measure in force (a spec as check_measure returns it; '' for none) and where it came from, in words."""
    spec: str
    source: str

    @property
    def words(self) -> str:
        """The measure and its source, as the Admin tab, `projects show` and the run's log say it."""
        if not self.spec:
            return f"none ({self.source}: no verdict; set one with projects set --measure)"
        described = describe(self.spec)
        if described.endswith(")"):  # "vader (sentiment)": one pair of brackets
            return f"{described[:-1]}; {self.source})"
        return f"{described} ({self.source})"


SET_HERE = "set for this project"
# The default in words before a project exists (the new-project form): the rule `default` applies.
DEFAULT_WORDS = "people's blind comparisons once someone labels the project, else its newest reward model"


def resolve(db: sqlite_utils.Database, project: str, run_function: str = "") -> Resolved:
    """The measure in force and why: the project's own, else `default`."""
    current = get_project(db, project)
    if current.measure:
        return Resolved(current.measure, SET_HERE)
    return default(db, project, run_function)


def default(db: sqlite_utils.Database, project: str, run_function: str = "") -> Resolved:
    """The measure of a project that sets none, and why: people's blind pairs when `labellers` finds someone; else
    the newest reward model trained on the project; else `run_function` (the function a run was rewarded by, given
    for a finished run's evaluation); else none. The one place that decides the default (module docstring)."""
    current = get_project(db, project)
    people = labellers(db, current.id)
    if people:
        who = "1 person has" if people == 1 else f"{people} people have"
        return Resolved(PEOPLE, f"default: {who} labelled this project and can rank the blind pairs")
    return automatic(db, current.id, run_function, "nobody has labelled this project yet")


def automatic(db: sqlite_utils.Database, project_id: int, run_function: str = "",
              why_not_people: str = "people judge only the finished model") -> Resolved:
    """The default's steps after people: a judge that scores answers without anyone (the newest reward model
    trained on the project, else `run_function`), else none."""
    newest = newest_project_reward_model(db, project_id)
    if newest:
        return Resolved(f"rm:{newest}", f"default: {why_not_people}; the newest reward model trained on it")
    if run_function:
        return Resolved(run_function, f"default: {why_not_people} and no reward model was trained on it; the "
                                      "function the run was rewarded by")
    return Resolved("", f"default: {why_not_people} and no reward model was trained on it")


def scorer(db: sqlite_utils.Database, project: str, run_function: str = "") -> Resolved:
    """What scores a run's answers while it trains (PPO's held-out curve): the measure in force, unless that is
    people, who judge the finished model only; then `automatic`'s judge (the curve's only use is its shape)."""
    resolved = resolve(db, project, run_function)
    if resolved.spec != PEOPLE:
        return resolved
    return automatic(db, get_project(db, project).id, run_function)


def resolve_measure(db: sqlite_utils.Database, project: str) -> str:
    """The spec of `resolve`: what an evaluation stores in its settings."""
    return resolve(db, project).spec


def describe(measure: str) -> str:
    """A measure in words, for the run's page and the report."""
    if not measure:
        return "no measure (set one: projects set --measure, label the project, or train a reward model)"
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
