"""The verdict a run's page, `runs show` and `eval` print: one sentence from the win rate's interval against 50%,
the interval in the table, the optimistic note, and why an evaluation that failed is missing (what to do)."""
from __future__ import annotations

import pytest

from labeler.cli import main
from labeler.services.evals import evaluation
from labeler.services.execution import runs
from labeler.errors import InputError
from labeler.ui.tabs.train.run_views import comparison_frame

SETTINGS = {"prompts": "heldout", "reward": "rm:judge", "samples": 2, "max_new_tokens": 8, "threshold": 0.5, "seed": 0,
            "bf16": False, "prompt_format": "chat", "prompts_n": 2, "prompts_hash": "x"}


def _rows(rewards, who="answer"):
    return [{"prompt": f"p{i // 2}", "answer": f"{who} {i}", "reward": r, "kl": 0.0, "length": 3}
            for i, r in enumerate(rewards)]


def test_verdict_sentence_in_words():
    assert evaluation.verdict_sentence(0.67, 0.55, 0.78) == (
        "The tuned model is better than its base (it won 67% of the comparisons, 95% interval 55% to 78%).")
    assert evaluation.verdict_sentence(0.3, 0.2, 0.42).startswith("The tuned model is worse than its base (it won 30%")
    undecided = evaluation.verdict_sentence(0.71, 0.36, 0.92)
    assert undecided.startswith("The tuned model is not yet distinguishable from its base (it won 71% of the "
                                "comparisons, 95% interval 36% to 92%, which includes 50%)")


def test_win_metrics_compare_every_answer_with_every_answer_by_hand():
    # prompt 0: model [1, 3] vs base [2, 2]: 1<2, 1<2, 3>2, 3>2 -> 2/4 = 0.5
    # prompt 1: model [5, 5] vs base [4, 5]: 5>4, 5=5, 5>4, 5=5 -> (1 + 0.5 + 1 + 0.5)/4 = 0.75
    metrics = evaluation.win_metrics(_rows([1, 3, 5, 5]), _rows([2, 2, 4, 5]), samples=2)
    assert metrics["eval/win_rate"] == pytest.approx(0.625)
    assert (metrics["eval/win_pairs"], metrics["eval/win_ties"]) == (8, 2)
    # shares 0.5, 0.75: variance (0.125^2 * 2)/1 = 0.03125; p(1-p) = 0.234375 -> 0.234375 * 2 / 0.03125 = 15 trials,
    # more than the 8 pairs compared: 8
    assert metrics["eval/win_trials"] == pytest.approx(8.0)
    from rlhf.stats import wilson_interval
    assert (metrics["eval/win_low"], metrics["eval/win_high"]) == pytest.approx(wilson_interval(0.625, 8.0))
    assert evaluation.win_metrics(_rows([1, None]), _rows([1, 2]), samples=2) == {}


def _run(db, tmp_path, job: dict) -> int:
    return runs.insert_run(db, "ppo", {"job": job}, "default", None, "", tmp_path)


def _evaluated(db, run_id, base_rewards, model_rewards, reward="rm:judge"):
    settings = {**SETTINGS, "reward": reward}
    base = evaluation._store(db, "default", "base-m", "base-m", None, settings, {"eval/length_mean": 3.0}, _rows(base_rewards))
    rows = _rows(model_rewards, "tuned")
    metrics = {"eval/length_mean": 3.0, **evaluation.win_metrics(rows, base.samples, 2)}
    return evaluation._store(db, "default", "tuned-m", "base-m", run_id, settings, metrics, rows)


def test_the_page_and_runs_show_say_the_same_verdict_and_the_optimistic_note(db, db_path, tmp_path, capsys):
    run_id = _run(db, tmp_path, {"reward": "rm", "reward_model": "judge"})
    after = _evaluated(db, run_id, [0, 0, 0, 0], [1, 1, 1, 1])  # every answer better: 100%, 2 prompts
    sentence, warnings = evaluation.run_verdict(db, run_id)
    assert sentence == evaluation.evaluation_verdict(after)
    assert sentence.startswith("The tuned model is not yet distinguishable") and "100%" in sentence  # 2 prompts
    assert warnings == [evaluation.measures.OPTIMISTIC]

    metrics, _, note = comparison_frame(db, run_id)
    assert note.startswith(f"**{sentence}**") and "optimistic" in note
    assert list(metrics[evaluation.INTERVAL_LABEL].fillna("-")) == ["-", f"{after.metrics['eval/win_low']:.0%} to 100%"]

    assert main(["runs", "show", str(run_id), "--db", db_path]) == 0
    out = capsys.readouterr().out
    assert f"  verdict: {sentence}" in out and f"  note: {evaluation.measures.OPTIMISTIC}" in out
    # `eval` prints the same sentence and the note for the model of that run
    assert evaluation.verdict_lines(db, [after]) == [f"tuned-m: {sentence}",
                                                      f"tuned-m: note: {evaluation.measures.OPTIMISTIC}"]


def test_a_failed_evaluation_says_why_and_what_to_do(db, db_path, tmp_path, capsys, monkeypatch):
    run_id = _run(db, tmp_path, {})
    model = {"name": "ppo-run1", "kind": "policy"}

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(evaluation, "_evaluate_finished_run", out_of_memory)
    with pytest.raises(RuntimeError):
        evaluation.evaluate_finished_run(db, run_id, "ppo", "default", None, model)
    failure = evaluation.evaluation_failure(db, run_id)
    assert failure.reason == "out of memory (RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB)"
    assert "`rlhf-studio eval --model ppo-run1` loads one model at a time" in failure.advice
    line = evaluation.failure_line(failure)
    assert comparison_frame(db, run_id)[2] == f"⚠ {line}"
    assert main(["runs", "show", str(run_id), "--db", db_path]) == 0
    assert f"  verdict: {line}" in capsys.readouterr().out

    # a person's mistake names itself; a later success clears the row
    def bad_measure(*args, **kwargs):
        raise InputError("no reward model named 'gone'", field="reward")

    monkeypatch.setattr(evaluation, "_evaluate_finished_run", bad_measure)
    with pytest.raises(InputError):
        evaluation.evaluate_finished_run(db, run_id, "ppo", "default", None, model)
    assert evaluation.evaluation_failure(db, run_id).reason == "no reward model named 'gone'"
    monkeypatch.setattr(evaluation, "_evaluate_finished_run", lambda *a, **k: None)
    evaluation.evaluate_finished_run(db, run_id, "ppo", "default", None, model)
    assert evaluation.evaluation_failure(db, run_id) is None


def test_an_optimistic_judge_queues_blind_pairs_and_people_decide(db, tmp_path, monkeypatch):
    """A run judged by the reward model it optimised: its base's and its answers also go to people, blind, and once
    they rank, their verdict is the run's (the reward model's figure kept beside it)."""
    from labeler.services.data import accounts, labeling, prompts
    from labeler.services.settings.job_settings import JobConfig

    prompts.add_prompts(db, ["q0", "q1"])
    db.execute("UPDATE prompts SET split = 'test'")
    run_id = _run(db, tmp_path, {"reward": "rm", "reward_model": "judge"})
    base = evaluation._store(db, "default", "base-m", "base-m", None, SETTINGS, {"eval/length_mean": 3.0},
                             _rows([0, 0, 0, 0]))
    after = _evaluated(db, run_id, [0, 0, 0, 0], [1, 1, 1, 1])
    monkeypatch.setattr(evaluation, "evaluate_models", lambda *args, **kwargs: [base, after])
    monkeypatch.setattr(evaluation, "kl_base", lambda db_, name: "base-m")
    lines = []
    evaluation.evaluate_finished_run(db, run_id, "ppo", "default", JobConfig(reward="rm", reward_model="judge"),
                                     {"name": "tuned-m", "kind": "policy"}, log=lines.append)
    assert ("evaluation: 2 blind comparisons of the base's and the model's answers queued for people (Rank): the "
            "measure is the reward model this run optimised") in lines
    sentence, warnings = evaluation.run_verdict(db, run_id)  # nobody has ranked: the reward model's, optimistic
    assert sentence == evaluation.evaluation_verdict(after) and warnings == [evaluation.measures.OPTIMISTIC]

    accounts.create_user(db, "ann", "a long enough password")
    for _ in range(2):  # ann prefers the base's answer both times
        item = labeling.next_item(db, "default", "ann", "ranking")
        by_model = {r["model"]: r["id"] for r in item.responses}
        labeling.submit_ranking(db, "default", "ann", item.item_id, [[by_model["base-m"]], [by_model["tuned-m"]]])
    sentence, warnings = evaluation.run_verdict(db, run_id)
    # 0 of 2: Wilson's interval at 0 over 2 prompts is 0% to 66%: undecided
    assert sentence.startswith("The tuned model is not yet distinguishable from its base (it won 0% of the "
                               "comparisons, 95% interval 0% to 66%")
    assert sentence.endswith("(people's blind comparisons; by the reward model it was trained on: 100%, 95% "
                             f"interval {after.metrics['eval/win_low']:.0%} to 100%)")
    assert warnings == []
