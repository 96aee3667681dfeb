"""The online-dpo stage in the app: run in-process through the worker's entry point on a tiny model with a function
judge, the model registered with its lineage; the judge setting checked when a run is queued; a judge function that
breaks stops the run naming the function and the step."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from labeling_helpers import add_ranked_pairs

from labeler.services.data import accounts, labeling
from labeler.services.training import jobs, train_configs
from labeler.services.serving import models
from labeler.services.execution import run_judgements, run_metrics, runs
from labeler.errors import InputError
from labeler.worker import run_worker

# One pass over each step's pairs (the app's default), so a run's steps are its judged batches.
SMALL = {"max_new_tokens": 4, "per_device_train_batch_size": 2, "eval_samples": 0, "learning_rate": 1e-3,
         "num_iterations": 1}


def _seed(db, n_prompts=4):
    accounts.create_user(db, "ann", "a-long-password")
    accounts.create_user(db, "boss", "a-long-password", role="admin")
    add_ranked_pairs(db, n_prompts, rate=True)


def _run(db, settings, tmp_path):
    run = jobs.create_run(db, "online-dpo", settings, runs_dir=tmp_path / "runs", start=False, username="boss")
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    status = run_worker(runs.db_file(db), run.id)
    return status, runs.get_run(db, run.id)


@pytest.fixture
def team_judges(tmp_path, monkeypatch):
    """A module of judge functions (prompts, answers) -> scores, importable as team_judges."""
    (tmp_path / "team_judges.py").write_text(
        "def shorter(prompts, answers):\n    return [-len(a) for a in answers]\n\n"
        "def one_score(prompts, answers):\n    return [1.0]\n\n"
        "def needs_network(prompts, answers):\n    raise ConnectionError('judge server unreachable')\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_online_dpo_trains_with_a_function_judge_checkpoints_and_registers(db, tmp_path, tiny_model_dir, team_judges):
    _seed(db)
    # steps=2 judged batches, each trained on twice: 4 optimizer steps, pairs judged at steps 1 and 3
    status, run = _run(db, {"model": str(tiny_model_dir), "steps": 2, "checkpoint_every": 2, "keep_checkpoints": True,
                            "judge": "team_judges:shorter", **SMALL, "num_iterations": 2}, tmp_path)
    assert status == "succeeded", (run.error, run_metrics.log_tail(run))
    assert (run.step, run.total_steps) == (4, 4)
    model = models.get_model(db, f"online-dpo-run{run.id}")
    assert (model["kind"], model["base_model"]) == ("policy", str(tiny_model_dir))
    assert model["data_snapshot"].startswith("prompts:")
    names = set(run_metrics.metric_names(db, run.id))
    assert {"loss", "rewards/margins", "objective/kl", "objective/scores", "judge/ties", "beta"} <= names
    assert (Path(run.output_dir) / "checkpoints" / "checkpoint-2").exists()
    assert (Path(run.output_dir) / "model" / "model.safetensors").exists()
    # each pair recorded at its step as the function's judgement: the shorter answer wins, equal lengths tie
    judged = run_judgements.run_judgements(db, run.id)
    assert [j.step for j in judged] == [1, 1, 3, 3]
    for j in judged:
        by_length = 0 if len(j.first) < len(j.second) else 1 if len(j.second) < len(j.first) else -1
        assert (j.judged_by, j.verdict, j.model, j.people, j.item_id) == ("model", by_length, by_length, None, None)
    assert run_judgements.judge_summary(db, run.id).by_model == 4


def test_a_judge_function_that_breaks_stops_the_run_naming_it_and_the_step(db, tmp_path, tiny_model_dir, team_judges):
    _seed(db)
    base = {"model": str(tiny_model_dir), "steps": 2, "checkpoint_every": 0, **SMALL}
    status, run = _run(db, {**base, "judge": "team_judges:one_score"}, tmp_path)
    assert status == "failed"
    # 2 prompts x 2 answers scored in one call
    assert "judge 'team_judges:one_score' returned 1 scores for 4 completions (at step 1)" in run.error
    status, run = _run(db, {**base, "judge": "team_judges:needs_network"}, tmp_path)
    assert status == "failed"
    assert ("judge 'team_judges:needs_network' failed: ConnectionError: judge server unreachable (at step 1)"
            in run.error)


@pytest.mark.parametrize("failure, message", [
    ("raise TimeoutError('the judging service timed out')",
     "judge 'judges_that_tire_{0}:tires' failed: TimeoutError: the judging service timed out (at step 2)"),
    ("return [1.0]", "judge 'judges_that_tire_{0}:tires' returned 1 scores for 4 completions (at step 2)"),
])
def test_a_judge_function_that_breaks_later_keeps_the_judgements_made_before(db, tmp_path, tiny_model_dir, monkeypatch,
                                                                              failure, message):
    """Step 1 judged, step 2's call breaks: the run stops naming the function and step 2; step 1's pairs stay."""
    module = f"judges_that_tire_{len(failure)}"  # a module name of its own per case (imports are cached)
    (tmp_path / f"{module}.py").write_text(
        "calls = []\n\n\ndef tires(prompts, answers):\n    calls.append(len(answers))\n"
        f"    if len(calls) > 1:\n        {failure}\n    return [-len(a) for a in answers]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _seed(db)
    status, run = _run(db, {"model": str(tiny_model_dir), "steps": 2, "checkpoint_every": 0,
                            "judge": f"{module}:tires", **SMALL}, tmp_path)
    assert status == "failed"
    assert message.format(len(failure)) in run.error
    judged = run_judgements.run_judgements(db, run.id)
    assert [(j.step, j.judged_by) for j in judged] == [(1, "model"), (1, "model")]


def test_the_judge_setting_is_checked_when_a_run_is_queued(db):
    from labeler.services.training.runners.online_dpo import StudioOnlineDPOConfig, app_judge

    assert train_configs.resolve_run_config("online-dpo", {"judge": "vader"})["trainer"]["judge"] == "vader"
    for judge in ("people", "mix", "mix:rm-a", "rm:rm-a"):
        assert train_configs.resolve_run_config("online-dpo", {"judge": judge})["trainer"]["judge"] == judge
    with pytest.raises(InputError, match="unknown reward 'sentiment'") as error:
        train_configs.resolve_run_config("online-dpo", {"judge": "sentiment"})
    assert error.value.field == "judge"
    with pytest.raises(InputError, match="no reward model registered"):
        app_judge("rm", db)
    assert app_judge("vader", db).name == "vader"
    config = StudioOnlineDPOConfig(output_dir="unused", report_to="none")
    assert (config.judge, config.learning_rate, config.per_device_train_batch_size, config.max_new_tokens) == \
        ("rm", 5e-5, 8, 16)
    # The job's answer length is the trainer's unless the trainer settings set it, stored when the run is resolved.
    from labeler.services.training.run_settings import resolve_run

    assert resolve_run(db, "default", "online-dpo", {"max_new_tokens": 8}).trainer_config().max_new_tokens == 8
    assert resolve_run(db, "default", "online-dpo", {}).trainer_config().max_new_tokens == 128  # the project's
    # `steps` counts judged batches: 4 passes over each make 4 optimizer steps of each (the default: one pass)
    assert (config.num_iterations, config.num_generations) == (1, 2)
    assert resolve_run(db, "default", "online-dpo", {"steps": 40}).trainer_config().max_steps == 40
    assert resolve_run(db, "default", "online-dpo", {"steps": 40, "num_iterations": 4}).trainer_config().max_steps == 160
    assert resolve_run(db, "default", "online-dpo", {"steps": 40, "max_steps": 7}).trainer_config().max_steps == 7


def test_the_web_form_may_not_name_code_as_the_judge(db):
    """The web form picks people, mix or a reward model as the judge, but a judge naming code to import
    (module:function) is set only from the command line."""
    _seed(db)
    with pytest.raises(InputError, match="only be set from the command line") as error:
        jobs.create_run(db, "online-dpo", {"judge": "os:system"}, start=False, from_web=True, username="boss")
    assert error.value.field == "judge" and db["runs"].count == 0


# ---- people as the judge ---------------------------------------------------------------------------------------
def test_groups_of_answers_by_hand():
    from labeler.services.training.runners.online_dpo import group_rankings, scored_judgements, verdict_on

    # two groups of 3 (centred ranks); the second not ranked in time
    assert group_rankings([0.0, 1.0, -1.0, None, 1.0, -1.0], 3) == [[1, 0, 2], []]
    assert group_rankings([0.5, 0.5, 0.5], 3) == [[]]  # all tied: no preference
    assert (verdict_on([1, 0, 2], 1, 2), verdict_on([1, 0, 2], 2, 0), verdict_on([], 0, 1)) == (0, 1, -1)
    # the trainer's layout for 2 prompts x 3 answers: answer k of prompt i at k * 2 + i
    prompts = ["p", "q"] * 3
    answers = ["p0", "q0", "p1", "q1", "p2", "q2"]
    judged = scored_judgements(7, prompts, answers, [0.1, 5.0, 0.9, 5.0, -2.0, 5.0], group_size=3)
    assert [(j.step, j.prompt, j.first, j.second, j.verdict, j.model) for j in judged] == [
        (7, "p", "p1", "p2", 0, 0),  # the best (0.9) and the worst (-2.0)
        (7, "q", "q0", "q1", -1, -1)]  # all equal: no preference
    with pytest.raises(ValueError, match="the prompts 3 times"):
        scored_judgements(1, ["p", "q", "q", "p", "p", "q"], answers, [0.0] * 6, group_size=3)


def test_pair_verdicts_from_centred_ranks():
    from labeler.services.training.runners.online_dpo import group_rankings
    from rlhf.judges import chosen_pair

    # pairs: (+1, -1) first better; (-1, +1) second better; (0, 0) a tie; (None, None) nobody ranked it in time
    rankings = group_rankings([1.0, -1.0, -1.0, 1.0, 0.0, 0.0, None, None], 2)
    assert [chosen_pair(r, 2)[2] for r in rankings] == [0, 1, -1, -1]


def test_the_mix_says_how_sure_each_ranking_is_of_its_best_over_its_worst():
    """MixJudge.confidence by hand: three prompts of 4 answers; the mix saw the first and third (the second's answers
    were all alike: a tie), the model ranked the first, people the third."""
    from types import SimpleNamespace

    import torch

    from labeler.services.training.runners.online_dpo import MixJudge

    # Two members' scores (at the model's temperature) for the mix's 8 answers: group 0 at 0-3, group 1 at 4-7.
    scores = torch.tensor([[0.0, 0.5, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0],
                           [0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    judge = MixJudge(SimpleNamespace(last_scores=scores, last_from_people={4, 5, 6, 7}))
    sure = judge.confidence([[2, 1, 0, 3], [], [0, 1, 2, 3]], asked=[0, 2], size=4)
    # prompt 0: best 2, worst 3: (sigmoid(1 - (-1)) + sigmoid(0 - 0)) / 2 = (0.880797 + 0.5) / 2 = 0.690399
    # prompt 1: not ranked, 1/2 (left out of the loss as a tie); prompt 2: people's ranking, sure
    assert sure == pytest.approx([0.690399, 0.5, 1.0], abs=1e-6)
    # The model's own rankings for the judgement log come from the same scores (the mix has no model here to score
    # again). Group 0's mean wins: answer 0 1.3775, 1 1.8426, 2 1.8059, 3 0.9740 (e.g. 1 beats 3 with
    # (sigmoid(1.5) + sigmoid(0.5)) / 2 = 0.7201); group 1 all alike: no preference.
    assert judge.model_rankings(2, 4) == [[1, 2, 0, 3], []]


def _annotator(db_path, stop: threading.Event, ranked: list):
    """Ranks every item the Rank tab offers `ann`: the shorter answers first, equal lengths tied."""
    from storage import open_db

    db = open_db(db_path)
    while not stop.is_set():
        item = labeling.next_item(db, "default", "ann", "ranking")
        if item is None or item.run_id is None:
            time.sleep(0.05)
            continue
        order = [[r["id"] for r in item.responses if len(r["text"]) == length]
                 for length in sorted({len(r["text"]) for r in item.responses})]
        labeling.submit_ranking(db, "default", "ann", item.item_id, order)
        ranked.append(item.item_id)
    db.conn.close()


def _run_with_annotator(db, db_path, settings, tmp_path) -> tuple[str, object, list]:
    """_run with `ann` ranking every run item beside it (_annotator, in its own thread); returns the run's status,
    the run, and the ids of the items ann ranked."""
    _seed(db)
    stop, ranked = threading.Event(), []
    thread = threading.Thread(target=_annotator, args=(db_path, stop, ranked))
    thread.start()
    try:
        status, run = _run(db, settings, tmp_path)
    finally:
        stop.set()
        thread.join()
    return status, run, ranked


def test_people_judge_each_pair_in_the_rank_tab_and_the_run_learns_from_them(db, db_path, tmp_path, tiny_model_dir,
                                                                              capsys):
    status, run, ranked = _run_with_annotator(db, db_path, {
        "model": str(tiny_model_dir), "steps": 2, "checkpoint_every": 0, "judge": "people", "human_timeout": 60,
        **SMALL}, tmp_path)
    assert status == "succeeded", (run.error, run_metrics.log_tail(run))
    # 2 steps x 2 prompts: each pair (unless its two answers were the same text) one ranking item of 2 answers
    items = db.execute("SELECT id, kind FROM items WHERE run_id = ?", [run.id]).fetchall()
    assert 1 <= len(items) <= 4 and {kind for _, kind in items} == {"ranking"}
    assert sorted(ranked) == sorted(item_id for item_id, _ in items)  # every one ranked, none left waiting
    assert labeling.waiting_for_run(db, run.id) == 0
    assert {"rewards/margins", "judge/ties", "human/pairs_judged"} <= set(run_metrics.metric_names(db, run.id))
    # the annotator's verdicts all count (no timeouts): the log says how many pairs people judged
    assert f"people ranked {len(items)} pairs" in capsys.readouterr().out
    # every pair recorded: people's verdict (the shorter first, equal lengths a tie) and the item they saw, or none
    # for two identical answers (nobody asked)
    judged = run_judgements.run_judgements(db, run.id)
    assert [j.step for j in judged] == [1, 1, 2, 2]
    for j in judged:
        if j.first == j.second:
            assert (j.judged_by, j.verdict, j.people, j.item_id) == ("none", -1, None, None)
            continue
        by_length = 0 if len(j.first) < len(j.second) else 1 if len(j.second) < len(j.first) else -1
        assert (j.judged_by, j.verdict, j.people, j.model) == ("people", by_length, by_length, None)
    assert sorted(j.item_id for j in judged if j.item_id) == sorted(item_id for item_id, _ in items)
    summary = run_judgements.judge_summary(db, run.id)
    assert (summary.by_people, summary.by_model, summary.both) == (len(items), 0, 0)


def test_people_rank_four_answers_at_once_and_the_run_trains_on_the_best_and_the_worst(db, db_path, tmp_path,
                                                                                         tiny_model_dir):
    """num_generations=4: one Rank item of a prompt's 4 answers (one label), and the pair trained on and recorded
    is people's best (the shortest) and worst (the longest)."""
    status, run, ranked = _run_with_annotator(db, db_path, {
        "model": str(tiny_model_dir), "steps": 1, "checkpoint_every": 0, "judge": "people", "human_timeout": 60,
        **SMALL, "num_generations": 4}, tmp_path)
    assert status == "succeeded", (run.error, run_metrics.log_tail(run))
    items = [item_id for (item_id,) in db.execute("SELECT id FROM items WHERE run_id = ?", [run.id])]
    assert 1 <= len(items) <= 2 and sorted(ranked) == sorted(items)
    def answers(item_id):
        ids = json.loads(db.execute("SELECT response_ids_json FROM items WHERE id = ?", [item_id]).fetchone()[0])
        return [db["responses"].get(i)["text"] for i in ids]

    assert all(len(answers(item_id)) == 4 for item_id in items)
    judged = run_judgements.run_judgements(db, run.id)
    assert len(judged) == 2 and any(j.judged_by == "people" for j in judged)  # one pair a prompt
    for j in judged:
        if j.judged_by != "people":
            continue
        lengths = sorted(len(a) for a in answers(j.item_id))
        if lengths[0] == lengths[-1]:
            assert j.verdict == j.people == -1
        else:
            assert (len(j.first), len(j.second), j.verdict, j.people) == (lengths[0], lengths[-1], 0, 0)


def test_people_as_the_judge_are_refused_at_launch_without_annotators(db, tmp_path, tiny_model_dir):
    from labeling_helpers import add_prompt

    accounts.create_user(db, "boss", "a-long-password", role="admin")
    for text in ("A film about cats.", "A film about dogs."):
        add_prompt(db, text, 0)
    settings = {"model": str(tiny_model_dir), "steps": 1, "checkpoint_every": 0, **SMALL}
    for judge in ("people", "mix"):
        with pytest.raises(InputError, match=f"judge={judge}: there are no annotator accounts to rank the pairs; add "
                                             "one with `rlhf-studio users add NAME`") as error:
            jobs.create_run(db, "online-dpo", {**settings, "judge": judge}, runs_dir=tmp_path / "runs", start=False,
                            username="boss")
        assert error.value.field == "judge"
    assert db["runs"].count == 0  # refused before anything was written
    # Queued with an annotator, who is deactivated before the run starts: the run stops at its start, naming the fix.
    accounts.create_user(db, "ann", "a-long-password")
    run = jobs.create_run(db, "online-dpo", {**settings, "judge": "people"}, runs_dir=tmp_path / "runs", start=False,
                          username="boss")
    accounts.set_active(db, "ann", False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "failed"
    assert "judge=people: there are no annotator accounts" in runs.get_run(db, run.id).error


def test_mix_people_rank_the_pairs_the_reward_model_is_least_sure_of(db, db_path, tmp_path, tiny_model_dir):
    status, run, ranked = _run_with_annotator(db, db_path, {
        "model": str(tiny_model_dir), "steps": 2, "checkpoint_every": 0, "judge": "mix", "human_share": 0.5,
        "human_timeout": 60, "soft_judgements": True, **SMALL}, tmp_path)
    assert status == "succeeded", (run.error, run_metrics.log_tail(run))
    # half of each step's 2 pairs to people: one ranking item of two per step (none if its answers were the same)
    items = db.execute("SELECT id FROM items WHERE run_id = ?", [run.id]).fetchall()
    assert 1 <= len(items) <= 2 and sorted(ranked) == sorted(i for (i,) in items)
    names = set(run_metrics.metric_names(db, run.id))
    assert {"reward/from_human", "reward/from_rm", "human/answers_judged", "judge/ties"} <= names
    # each pair recorded: people's pairs with their verdict and the model's own on it; the rest the model's
    judged = run_judgements.run_judgements(db, run.id)
    assert [j.step for j in judged] == [1, 1, 2, 2]
    by_people = [j for j in judged if j.judged_by == "people"]
    assert sorted(j.item_id for j in by_people) == sorted(i for (i,) in items)
    for j in by_people:
        by_length = 0 if len(j.first) < len(j.second) else 1 if len(j.second) < len(j.first) else -1
        assert j.people == j.verdict == by_length and j.model in (-1, 0, 1)
    for j in judged:
        if j.judged_by == "model":
            assert j.people is None and j.model == j.verdict
    summary = run_judgements.judge_summary(db, run.id)
    assert (summary.by_people, summary.both) == (len(items), len(items))
    assert summary.by_people + summary.by_model + summary.undecided == 4
    # soft_judgements: the pairs trained on carried the mix's confidence (people's sure, the model's in [1/2, 1])
    confidence = [value for _, value, _ in run_metrics.metric_history(db, run.id, "judge/confidence")]
    assert confidence and all(0.5 <= value <= 1.0 for value in confidence)


def test_a_resumed_people_run_releases_the_pairs_its_last_start_left_waiting(db, db_path, tmp_path):
    from labeler.services.labels.human_reward import HumanRewardQueue
    from labeler.services.training.runners.online_dpo import people_judge
    from labeler.services.training.stages import StageContext

    _seed(db)
    run = jobs.create_run(db, "online-dpo", {"judge": "people"}, runs_dir=tmp_path / "runs", start=False)
    # the first start queued a pair and died before anyone ranked it
    HumanRewardQueue(db_path, "default", run.id, label_kind="ranking", group_size=2).request(["q", "q"], ["a", "b"])
    assert labeling.waiting_for_run(db, run.id) == 1
    ctx = StageContext(run.id, db_path, "online-dpo", "default", train_configs.load_job_config(run.config),
                       dict(run.config["trainer"]), tmp_path, sink=None)
    judge = people_judge(ctx, db)
    assert labeling.waiting_for_run(db, run.id) == 0  # still in the Rank tab, no longer ahead of everything
    assert judge.judge(["q"], [["same", "same"]]) == [[]]  # identical answers: no preference, nobody asked
    assert db.execute("SELECT COUNT(*) FROM items WHERE run_id = ?", [run.id]).fetchone()[0] == 1
