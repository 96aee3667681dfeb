"""bench/human_loop.py's pure parts for issue 46 item 3: the settings of each method's human run, each task's
held-out result (the shipped task's positive share, an example task's win rate against the base by its judge), the
methods' means and the verdict (online DPO with judge=mix against PPO with reward=mix), the comparison table per
task; and an example task's fresh database, set up through the CLI."""
from __future__ import annotations

import math
import sys
from pathlib import Path

from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench scripts import their siblings by plain name

import human_loop  # noqa: E402
from human_loop import (Criteria, held_out_result, human_settings, item3_verdict, method_summary,  # noqa: E402
                        parse_tasks, print_comparison, task_margins, task_target)


def _run(method: str, seed: int, positive: float, kl: float, distinct: float, labels: int, answers: int) -> dict:
    """A shipped-task run's result as human_run returns it."""
    return {"task": "shipped", "method": method, "seed": seed, "margin": 0.1, "wall_s": 600.0,
            "labels_by_team": labels, "judged_by_team": answers,
            "after": {"eval/positive_share": positive, "eval/kl": kl, "eval/distinct_2": distinct},
            "held_out": {"measure": "positive share", "value": positive, "low": None, "high": None}}


def _task_run(task: str, method: str, seed: int, win: tuple[float, float, float], kl: float, labels: int) -> dict:
    """An example task's run: its held-out result is the judge's win rate (with its interval); its evaluation has
    no positive share (VADER is not its measure)."""
    return {"task": task, "method": method, "seed": seed, "margin": 0.05, "wall_s": 900.0, "labels_by_team": labels,
            "judged_by_team": 2 * labels, "after": {"eval/kl": kl, "eval/distinct_2": 0.7},
            "held_out": {"measure": "win rate", "value": win[0], "low": win[1], "high": win[2]}}


def _summary(held_out: float, labels: float, worst_kl: float = 8.0, worst_distinct: float = 0.8,
             measure: str = "positive share") -> dict:
    return {"runs": 3, "measure": measure, "held_out": held_out, "kl": worst_kl, "distinct_2": worst_distinct,
            "labels": labels, "answers": 2 * labels, "worst_kl": worst_kl, "worst_distinct_2": worst_distinct}


def _evaluation(rows: list[tuple[str, str]], samples: int, metrics: dict | None = None):
    """An app evaluation as evaluation.run_comparison returns it: its answers, prompt by prompt, and its metrics."""
    return SimpleNamespace(samples=[{"prompt": p, "answer": a} for p, a in rows], settings={"samples": samples},
                           metrics=metrics or {})


def test_each_method_puts_people_in_its_loop_with_the_seed_and_the_settings_after():
    assert human_settings("ppo", 1, ["steps=10"]) == ["reward=mix", "seed=1", "steps=10"]
    # online DPO's own settings come after the shared ones, so they win as `train --set` reads them
    assert human_settings("online-dpo", 2, ["steps=10"], ["steps=20", "beta=0.2"]) == [
        "judge=mix", "seed=2", "steps=10", "steps=20", "beta=0.2"]
    with pytest.raises(SystemExit, match="'dpo' is not one of ppo, online-dpo"):
        human_settings("dpo", 0, [])


def test_method_summary_by_hand():
    runs = [_run("online-dpo", 0, 0.80, 6.0, 0.80, 80, 160), _run("online-dpo", 1, 0.90, 9.0, 0.70, 82, 164),
            _run("online-dpo", 2, 0.85, 12.0, 0.90, 78, 156)]
    summary = method_summary(runs)
    # held-out (0.80 + 0.90 + 0.85) / 3 = 0.85; KL 27 / 3 = 9; distinct (0.8 + 0.7 + 0.9) / 3 = 0.8;
    # labels 240 / 3 = 80, answers 480 / 3 = 160; worst KL 12, worst distinct-2 0.7
    assert summary.pop("measure") == "positive share"
    assert summary == pytest.approx({"runs": 3, "held_out": 0.85, "kl": 9.0, "distinct_2": 0.8, "labels": 80.0,
                                     "answers": 160.0, "worst_kl": 12.0, "worst_distinct_2": 0.7})


def test_method_summary_of_an_example_task_averages_the_judges_win_rates_not_a_positive_share():
    runs = [_task_run("concise", "ppo", 0, (0.70, 0.5, 0.85), 7.0, 160),
            _task_run("concise", "ppo", 1, (0.60, 0.4, 0.78), 9.0, 164)]
    summary = method_summary(runs)
    # win rate (0.70 + 0.60) / 2 = 0.65 (no eval/positive_share in either evaluation); labels 324 / 2 = 162
    assert summary["measure"] == "win rate"
    assert summary["held_out"] == pytest.approx(0.65) and summary["labels"] == pytest.approx(162.0)
    # a run without an evaluation has no held-out result: the mean says so (NaN) instead of skipping it
    assert math.isnan(method_summary([*runs, {**runs[0], "held_out": None}])["held_out"])


def test_item3_verdict_same_result_with_half_the_labels_or_better_with_as_many():
    ppo = _summary(0.88, 160)
    # the same (0.86 >= 0.88 - 0.03) with 80 / 160 = 0.5x the labels
    assert item3_verdict(_summary(0.86, 80), ppo) == (
        True, "the same result with at most half the labels: positive share 86% vs 88% with 0.50x people's labels")
    # the same with 0.51x the labels: not half
    assert item3_verdict(_summary(0.88, 81), ppo)[0] is False
    # better (0.92 > 0.88 + 0.03) with as many labels
    assert item3_verdict(_summary(0.92, 160), ppo) == (
        True, "a better result with at most as many labels: positive share 92% vs 88% with 1.00x people's labels")
    # better by no more than the margin, with as many: neither
    assert item3_verdict(_summary(0.90, 160), ppo) == (False, "positive share 90% vs 88% with 1.00x people's labels")
    # behind by more than the margin, even with few labels
    assert item3_verdict(_summary(0.84, 40), ppo)[0] is False
    # a wider margin says "the same" for it
    assert item3_verdict(_summary(0.84, 40), ppo, Criteria(same_within=0.05))[0] is True


def test_item3_verdict_needs_every_online_dpo_run_within_the_kl_and_diversity_bars():
    ppo = _summary(0.88, 160)
    assert item3_verdict(_summary(0.95, 80, worst_kl=10.5), ppo) == (
        False, "an online DPO run ended at KL 10.50 > 10")
    assert item3_verdict(_summary(0.95, 80, worst_distinct=0.44), ppo) == (
        False, "an online DPO run ended at distinct-2 0.440 < 0.45")
    assert item3_verdict(_summary(0.95, 80, worst_kl=math.nan), ppo)[0] is False  # a run with no evaluation
    assert item3_verdict(_summary(0.95, 80, worst_kl=10.0, worst_distinct=0.45), ppo)[0] is True  # at the bars


def test_the_comparison_table_needs_both_methods_and_ends_with_the_verdict(capsys):
    ppo = [_run("ppo", seed, 0.88, 9.0, 0.85, 160, 640) for seed in range(3)]
    dpo = [_run("online-dpo", seed, 0.87, 7.0, 0.80, 80, 160) for seed in range(3)]
    assert print_comparison(ppo) == {} and capsys.readouterr().out == ""
    verdicts = print_comparison(ppo + dpo)
    out = capsys.readouterr().out.splitlines()
    (met, why), = verdicts.values()
    assert list(verdicts) == ["shipped"] and met and why.startswith("the same result with at most half the labels")
    assert sum(line.lstrip().startswith("ppo |") for line in out) == 4  # 3 runs and the mean
    assert sum(line.lstrip().startswith("online-dpo |") for line in out) == 4
    assert out[-1] == f"issue 46 item 3 on shipped: met ({why})"
    assert human_loop.METHODS == {"ppo": "reward=mix", "online-dpo": "judge=mix"}


def test_the_comparison_compares_like_with_like_per_task(capsys):
    shipped = [_run("ppo", 0, 0.88, 9.0, 0.85, 160, 640), _run("online-dpo", 0, 0.87, 7.0, 0.80, 80, 160)]
    concise = [_task_run("concise", "ppo", seed, (0.75, 0.55, 0.88), 8.0, 160) for seed in (0, 1)]
    concise += [_task_run("concise", "online-dpo", 0, (0.62, 0.42, 0.79), 6.0, 80),
                _task_run("concise", "online-dpo", 1, (0.66, 0.45, 0.82), 6.0, 80)]
    verdicts = print_comparison(shipped + concise)
    out = capsys.readouterr().out
    # shipped alone: 87% vs 88% positive with 80 / 160 = 0.5x the labels: the same result with half
    assert verdicts["shipped"] == (
        True, "the same result with at most half the labels: positive share 87% vs 88% with 0.50x people's labels")
    # concise alone: DPO's mean win rate (0.62 + 0.66) / 2 = 0.64 against PPO's 0.75: behind by 0.11 > 0.03
    assert verdicts["concise"] == (False, "win rate 64% vs 75% with 0.50x people's labels")
    assert "issue 46 item 3 on concise: NOT met (win rate 64% vs 75% with 0.50x people's labels)" in out
    # each run's win rate shown with its 95% interval; the shipped runs' share without one
    assert "62% (42%-79%)" in out and "75% (55%-88%)" in out
    lines = out.splitlines()
    concise_table = lines[lines.index(next(line for line in lines if line.startswith("concise:"))):]
    assert concise_table[0] == ("concise: the held-out result is the win rate against the base by the task's judge "
                                "(95% interval over prompts)")
    assert sum(line.lstrip().startswith("ppo |") for line in concise_table) == 3  # its 2 runs and their mean


def test_a_shipped_runs_held_out_result_is_its_positive_share():
    after = _evaluation([("p", "great")], 1, {"eval/positive_share": 0.84})
    assert held_out_result("shipped", None, after) == {"measure": "positive share", "value": 0.84, "low": None,
                                                       "high": None}
    assert held_out_result("shipped", None, None) is None  # no evaluation


def test_an_example_tasks_held_out_result_is_the_judges_win_rate_against_the_base_with_its_interval():
    def words(prompts, answers):  # a judge: more words is better
        return [len(answer.split()) for answer in answers]

    base = _evaluation([("p1", "a b"), ("p1", "a b"), ("p2", "a"), ("p2", "x")], samples=2)
    tuned = _evaluation([("p1", "a b c"), ("p1", "a"), ("p2", "a b"), ("p2", "y")], samples=2)
    held = held_out_result("concise", base, tuned, words)
    # p1: 3 > 2 a win, 1 < 2 a loss; p2: 2 > 1 a win, 1 = 1 a tie: (2 + 0.5) / 4 = 0.625 over 2 prompts.
    # Wilson, z = 1.96, n = 2: centre (0.625 + 3.8416 / 4) / (1 + 3.8416 / 2) = 1.5854 / 2.9208 = 0.54280;
    # half 1.96 * sqrt(0.625 * 0.375 / 2 + 3.8416 / 16) / 2.9208 = 1.96 * 0.597735 / 2.9208 = 0.40111
    assert held == {"measure": "win rate", "value": 0.625, "low": pytest.approx(0.14169, abs=1e-5),
                    "high": pytest.approx(0.94391, abs=1e-5), "wins": 2, "ties": 1, "losses": 1, "prompts": 2}
    assert human_loop.describe_held_out(held) == "62% (14%-94%)"
    with pytest.raises(ValueError, match="row 1: the evaluations answer different prompts"):
        held_out_result("concise", base, _evaluation([("p1", "a"), ("p9", "b"), ("p2", "c"), ("p2", "d")], 2), words)


def test_tasks_margins_and_targets_follow_the_task():
    assert parse_tasks("concise, formal") == ["concise", "formal"] and parse_tasks("shipped") == ["shipped"]
    with pytest.raises(SystemExit, match="--task: 'poems' is not one of shipped, concise, explain, formal"):
        parse_tasks("concise,poems")
    with pytest.raises(SystemExit, match="--task: name at least one"):
        parse_tasks(" , ")
    # people tie by VADER's 0.1 on the shipped task, by own_task's 0.05 on a judge's [0, 1] scores
    assert task_margins("shipped", None) == [0.1] and task_margins("formal", None) == [0.05]
    assert task_margins("formal", "0.02,0.1") == [0.02, 0.1]
    assert task_target("shipped", None) == 0.8 and task_target("concise", None) == 0.7
    assert task_target("concise", 0.6) == 0.6


def test_an_example_tasks_database_is_set_up_as_own_task_sets_it_up(tmp_path):
    from labeler.services.data.projects import DEFAULT_ANSWER_TOKENS, SET_BY_HAND, get_project
    from labeler.services.data.prompts import heldout_target
    from storage import open_db

    studio = human_loop.task_database("concise", tmp_path / "studio.db", tmp_path)
    assert studio.project == "concise"
    db = open_db(str(tmp_path / "studio.db"), migrate=False)
    try:
        project = get_project(db, "concise")
        splits = dict(db.execute("SELECT split, COUNT(*) FROM prompts WHERE project_id = ? GROUP BY split",
                                 [project.id]).fetchall())
    finally:
        db.conn.close()
    # the app's chat default, given (no fit at import), and the task's judge as the measure
    assert (project.answer_tokens, project.answer_tokens_origin) == (DEFAULT_ANSWER_TOKENS["chat"], SET_BY_HAND)
    assert project.measure == "bench.tasks.concise.judge:judge" and project.heldout_share == 0.1
    # the task's 100 prompts, held out by the app's rule at a share of 0.1: at least 30 so the verdict can decide
    assert splits == {"train": 70, "test": heldout_target(100, 0.1)} and heldout_target(100, 0.1) == 30
