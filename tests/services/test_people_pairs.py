"""The `people` measure's blind pairs and page (issue 49, item 5): a later run's pairs never show a base answer an
earlier run's pairs showed (the base's evaluation answers are reused across runs), and the run's evaluation carries
people's win rate and its interval as they rank (the Train tab's column, chart and note read it)."""
from __future__ import annotations

import pytest

from labeler.services.data import accounts, labeling, projects, prompts
from labeler.services.evals import people_eval
from labeler.services.evals.evaluation import Evaluation

TEXTS = ["The film was", "I watched it and"]


def _setup(db):
    prompts.add_prompts(db, TEXTS)
    db.execute("UPDATE prompts SET split = 'test'")
    projects.update_project(db, "default", measure="people")


def _run(db) -> int:
    return db.execute("INSERT INTO runs (project_id, stage, status, step, total_steps) VALUES (1, 'ppo', 'succeeded', 1, 1)"
                      ).lastrowid


def _samples(*answers):
    return [{"answer": answer} for answer in answers]


def _base_answers_shown(db, run_id: int) -> list[str]:
    return [row[0] for row in db.execute("SELECT text FROM responses WHERE run_id = ? AND model = 'base' ORDER BY id",
                                         [run_id])]


def test_a_later_run_never_shows_a_base_answer_an_earlier_pair_showed(db):
    _setup(db)
    base = _samples("b1 first", "b1 second", "b2 first", "b2 second")  # 2 answers per prompt, the base's
    first, second, third = _run(db), _run(db), _run(db)
    assert people_eval.queue_comparisons(db, "default", first, "base", "m1", base, _samples(*"wxyz"), 2) == 2
    assert _base_answers_shown(db, first) == ["b1 first", "b2 first"]
    assert people_eval.queue_comparisons(db, "default", second, "base", "m2", base, _samples(*"wxyz"), 2) == 2
    assert _base_answers_shown(db, second) == ["b1 second", "b2 second"]  # the unseen ones
    # Every base answer was shown: no pair a person could recognise.
    assert people_eval.queue_comparisons(db, "default", third, "base", "m3", base, _samples(*"wxyz"), 2) == 0


def test_the_runs_evaluation_carries_peoples_win_rate_and_interval_as_they_rank(db):
    _setup(db)
    run_id = _run(db)
    people_eval.queue_comparisons(db, "default", run_id, "base", "tuned", _samples("b", "b", "c", "c"),
                                  _samples("t", "t", "u", "u"), 2)
    after = Evaluation(1, "tuned", "base", run_id, {"reward": "people"}, {"eval/kl": 0.1}, [], "")
    assert people_eval.with_people_verdict(db, run_id, after) is after  # nobody has ranked yet
    accounts.create_user(db, "ann", "a long enough password")
    item = labeling.next_item(db, "default", "ann", "ranking")
    tuned = next(r["id"] for r in item.responses if r["model"] == "tuned")
    base = next(r["id"] for r in item.responses if r["model"] == "base")
    labeling.submit_ranking(db, "default", "ann", item.item_id, [[tuned], [base]])
    shown = people_eval.with_people_verdict(db, run_id, after)
    assert shown.metrics["eval/win_rate"] == 1.0 and shown.metrics["eval/kl"] == 0.1
    assert shown.metrics["eval/win_low"] == pytest.approx(0.2065, abs=1e-3)  # Wilson, 1 of 1: 1/(1+1.96^2)
    assert shown.metrics["eval/win_high"] == 1.0
    other = Evaluation(1, "tuned", "base", run_id, {"reward": "vader"}, {}, [], "")
    assert people_eval.with_people_verdict(db, run_id, other) is other
