"""bench/own_task.py's pure parts (the judge's win rate with a tie margin, pairing stored evaluations, the targets,
the table) and the judge-driven simulated annotators' pure parts (bench/simulated_annotators.py)."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench scripts import their siblings by plain name

import own_task  # noqa: E402
import simulated_annotators as people  # noqa: E402
from own_task import Row, format_table, paired_answers  # noqa: E402
from rlhf.evaluation import WinRate  # noqa: E402


def _win(wins: int, ties: int, losses: int, low: float = 0.5, high: float = 0.9) -> WinRate:
    return WinRate((wins + ties / 2) / (wins + ties + losses), low, high, wins, ties, losses, 10)


def test_judge_win_rate_ties_within_the_margin_and_counts_prompts_for_the_interval():
    tuned = [0.90, 0.50, 0.53, 0.10, 0.70, 0.80]
    base = [0.50, 0.52, 0.50, 0.30, 0.70, 0.60]
    # differences +0.40 win, -0.02 tie, +0.03 tie, -0.20 loss, 0 tie, +0.20 win (margin 0.05)
    # rate (2 + 3 / 2) / 6 = 0.58333; 3 prompts of 2 samples: Wilson over n = 3 at z = 1.96:
    # z^2/n = 1.28053, centre = (0.58333 + 0.64027) / 2.28053 = 0.53654,
    # half = 1.96 * sqrt(0.24306 / 3 + 3.8416 / 36) / 2.28053 = 1.96 * 0.43328 / 2.28053 = 0.37238
    # -> (0.16416, 0.90892)
    result = own_task.judge_win_rate(tuned, base, samples=2, margin=0.05)
    assert (result.wins, result.ties, result.losses, result.prompts) == (2, 3, 1, 3)
    assert result.rate == pytest.approx(3.5 / 6)
    assert (result.low, result.high) == (pytest.approx(0.16416, abs=1e-4), pytest.approx(0.90892, abs=1e-4))
    # without a margin only the exact equality ties: +0.40, +0.03, +0.20 win; -0.02, -0.20 lose
    exact = own_task.judge_win_rate(tuned, base, samples=2)
    assert (exact.wins, exact.ties, exact.losses) == (3, 1, 2)
    with pytest.raises(ValueError, match="2 tuned scores but 1 base"):
        own_task.judge_win_rate([1.0, 0.0], [0.5], samples=1)


def test_paired_answers_pairs_rows_of_equal_prompts_and_refuses_others():
    base = [{"prompt": "q1", "answer": "b1"}, {"prompt": "q1", "answer": "b2"}, {"prompt": "q2", "answer": "b3"}]
    tuned = [{"prompt": "q1", "answer": "t1"}, {"prompt": "q1", "answer": "t2"}, {"prompt": "q2", "answer": "t3"}]
    assert paired_answers(base, tuned) == (["q1", "q1", "q2"], ["b1", "b2", "b3"], ["t1", "t2", "t3"])
    with pytest.raises(ValueError, match="row 2: the evaluations answer different prompts"):
        paired_answers(base, [*tuned[:2], {"prompt": "q3", "answer": "t3"}])
    with pytest.raises(ValueError, match="3 base rows, 2 tuned rows"):
        paired_answers(base, tuned[:2])


def _row(**changes) -> Row:
    values = dict(run="ppo reward=rm", model="ppo-run3", judge_base=0.40, judge_tuned=0.70,
                  judge_win=_win(30, 4, 6), app_measure="rm:rm-run2", app_base=0.0, app_tuned=1.2,
                  app_win=(0.70, 0.5, 0.85), kl=5.0, distinct_2=0.60, distinct_2_base=0.80, length=40.0,
                  length_base=60.0, truncated=0.1, judged=360)
    values.update(changes)
    return Row(**values)


def test_targets_of_item_5():
    # judge: (30 + 2) / 40 = 0.80 >= 0.70; app 0.70 is 10 points off (<= 15)
    assert _row().targets() == {"win_rate": True, "kl": True, "distinct_2": True, "judged": True,
                                "app_vs_judge": True}
    missed = _row(judge_win=_win(20, 0, 20), kl=12.0, distinct_2=0.30, judged=480).targets()
    assert missed == {"win_rate": False, "kl": False, "distinct_2": False, "judged": False, "app_vs_judge": False}
    # the online mix run is held to item 7's 800 answers, not the offline path's 400
    assert _row(judged=640, online=True).targets()["judged"] is True


def test_format_table_marks_each_target():
    table = format_table("concise", [_row(), _row(run="dpo", kl=12.0)])
    lines = table.splitlines()
    assert lines[0] == "### concise"
    assert "| ppo reward=rm (ppo-run3) | 80% (" in lines[4] and "NOT met" not in lines[4]
    assert "12.00 NOT met" in lines[5]
    assert "win rate >= 70%" in table and "KL <= 10" in table


def _evaluation(answers: list[str], metrics: dict):
    from types import SimpleNamespace

    samples = [{"prompt": f"q{i // 2}", "answer": a} for i, a in enumerate(answers)]
    return SimpleNamespace(samples=samples, settings={"samples": 2, "reward": "people"}, metrics=metrics)


def test_a_run_judged_by_people_takes_their_win_rate_as_the_apps():
    # an evaluation by people's measure stores no mean score: it scores no answer (evaluation.py)
    metrics = {"eval/distinct_2": 0.9, "eval/length_mean": 3.0, "eval/kl": 2.5}
    before = _evaluation(["a", "a", "a", "a"], metrics)
    after = _evaluation(["a b", "a", "a b c", "a b"], metrics)
    length = lambda prompts, answers: [float(len(a.split())) for a in answers]  # noqa: E731 - a judge: longer wins
    people_verdict = WinRate(0.25, 0.05, 0.7, 0, 1, 1, 2)
    row = own_task.measure("dpo", "dpo-run3", before, after, length, 0.0, judged=360, people_win=people_verdict)
    # the judge: 3 of 4 tuned answers longer than the base's, one equal -> (3 + 0.5) / 4
    assert row.judge_win.rate == 0.875 and (row.judge_win.wins, row.judge_win.ties) == (3, 1)
    assert row.app_win == (0.25, 0.05, 0.7) and row.app_measure == "people"
    assert row.app_base != row.app_base and row.app_tuned != row.app_tuned  # nan: no mean score
    assert "people" in own_task.format_table("concise", [row])
    assert row.targets()["app_vs_judge"] is False  # 62.5 points apart
    # without people's verdict the app's win rate is the stored evaluation's (none here)
    unjudged = own_task.measure("dpo", "dpo-run3", before, after, length, 0.0, judged=360)
    assert unjudged.app_win[0] != unjudged.app_win[0]  # nan: the evaluation stored no win rate


def test_ranks_and_ratings_of_a_judge_on_zero_to_one():
    # ties within the margin share a rank: 0.80 and 0.77 tie at the top (margin 0.05), 0.50 is next
    assert people.ranks_from_scores([0.50, 0.80, 0.77], margin=0.05) == ["2", "1", "1"]
    assert people.rating_from_score(0.5, score_range=(0.0, 1.0)) == 4  # 1 + 0.5 * 6
    assert people.rating_from_score(1.3, score_range=(0.0, 1.0)) == 7  # outside the range: its end
    # VADER's [-1, 1] by default, as before: -0.6 -> 1 + 0.2 * 6 = 2.2 -> 2; 0 -> 4; 1 -> 7
    assert [people.rating_from_score(s) for s in (-0.6, 0.0, 1.0)] == [2, 4, 7]


def test_the_prompt_is_read_from_the_item_shown():
    assert people.prompt_shown("### Prompt\nHow do I reset my password?") == "How do I reset my password?"
    assert people.prompt_shown({"value": "### Prompt\nLine one\nline two"}) == "Line one\nline two"
    assert people.prompt_shown(None) == ""


def test_a_budget_shared_by_threads_is_never_overspent():
    budget = people.Budget(10)
    assert budget.take(4) and budget.take(4) and not budget.spent
    assert not budget.take(4)  # 8 + 4 > 10: refused, nothing reserved; the team stops there
    assert budget.used == 8 and budget.spent
    assert budget.take(2) and budget.used == 10  # a smaller item still fits
    shared, taken = people.Budget(100), []

    def grab() -> None:
        while shared.take(3):
            taken.append(3)

    threads = [threading.Thread(target=grab) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(taken) == 99 and shared.used == 99  # 33 rankings of 3 fit in 100, a 34th would not


class _FakeClient:
    """gradio_client's Client as the Rank tab answers: one item of three answers, then the empty queue."""

    def __init__(self):
        self.submitted = []

    def predict(self, *args, api_name):
        if api_name == "/rank_submit":
            self.submitted.append(args)
            return ("",) * 21 + ("",)
        slots = []
        for text in ("Yes.", "Open Settings, choose Reset password and follow the link we email you.", "To reset"):
            slots += [f"#### Answer\n\n{text}", None]
        slots += ["", None] * 5  # the 8 slots' answer and rank widgets; a slot's group sends no value
        return ("", "0 done", "### Prompt\nHow do I reset my password?", *slots[:16], "", "", {}, "7:req")


def test_a_judge_driven_annotator_ranks_by_the_judge_and_spends_the_budget():
    from bench.tasks.concise.judge import judge

    annotator = people.WebAnnotator.__new__(people.WebAnnotator)  # no server: the fields as __init__ sets them
    for name, value in dict(url="", username="p", pace=0.0, judge=judge, margin=0.05, score_range=(0.0, 1.0),
                            budget=people.Budget(5), labels={"rating": 0, "ranking": 0}, answers_judged=0,
                            errors=0).items():
        setattr(annotator, name, value)
    annotator.client, annotator._shown = _FakeClient(), {"rating": None, "ranking": None}
    assert annotator.label("ranking") is True
    (comment, key, *ranks), = annotator.client.submitted
    # "Yes." 0.075, the complete answer ~1.0, "To reset" (2 words, unfinished) low: the complete one ranks first
    assert key == "7:req" and ranks[1] == "1" and ranks[0] != "1"
    assert annotator.answers_judged == 3 and annotator.budget.used == 3
    annotator._shown["ranking"] = None
    assert annotator.label("ranking") is False  # 3 more would pass the budget of 5: left for someone else
    assert len(annotator.client.submitted) == 1


def test_timings_table_gives_the_estimate_the_actual_and_their_ratio():
    timings = [own_task.Timing("dpo", 3, estimate_s=600.0, wall_s=690.0),  # 690 / 600 = 1.15
               own_task.Timing("rm", 2, estimate_s=None, wall_s=120.4)]
    assert timings[0].ratio == pytest.approx(1.15) and timings[1].ratio is None
    assert timings[0].as_dict() == {"wall_s": 690.0, "estimate_s": 600.0, "actual_over_estimate": pytest.approx(1.15)}
    assert own_task.Timing("x", 1, estimate_s=0.0, wall_s=5.0).ratio is None  # no estimate, not a division by 0
    lines = own_task.format_timings(timings).splitlines()
    assert lines[2] == "| dpo (#3) | 600 s | 690 s | 1.15 |"
    assert lines[3] == "| rm (#2) | none | 120 s | - |"


def test_the_reward_model_is_trained_only_when_the_recipe_needs_it():
    # --measure people --skip-ppo --skip-mix: DPO alone, no reward model
    assert own_task.needs_reward_model("people", skip_ppo=True, skip_mix=True) is False
    assert own_task.needs_reward_model("rm", skip_ppo=True, skip_mix=True) is True  # the measure judges by it
    assert own_task.needs_reward_model("people", skip_ppo=False, skip_mix=True) is True  # PPO reward=rm
    assert own_task.needs_reward_model("people", skip_ppo=True, skip_mix=False) is True  # the mix run's warm start


def test_the_estimate_is_the_previews_for_the_settings_the_cli_gets(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from labeler.services.training import run_preview

    asked = []

    def preview(db, project, stage, values):
        asked.append((project, stage, values))
        estimate = SimpleNamespace(total_seconds=42.5) if stage == "ppo" else None
        return SimpleNamespace(estimate=estimate)

    monkeypatch.setattr(run_preview, "preview_run", preview)
    closed = []
    studio = own_task.Studio(tmp_path / "studio.db", "concise", tmp_path)
    handle = SimpleNamespace(conn=SimpleNamespace(close=lambda: closed.append(1)))
    monkeypatch.setattr(studio, "db_handle", lambda: handle)
    assert own_task.app_estimate(studio, "ppo", ["seed=0", "reward=rm"]) == 42.5
    assert own_task.app_estimate(studio, "dpo", ["seed=1"]) is None
    assert asked == [("concise", "ppo", {"seed": "0", "reward": "rm"}), ("concise", "dpo", {"seed": "1"})]
    assert closed == [1, 1]


def test_more_runs_count_what_people_ranked_when_the_recipe_left_no_row(tmp_path, db_path):
    """--more after a recipe whose runs were all skipped: the answers judged are the ranked answers in the db."""
    from helpers import rank_good_over_bad
    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, "ann", "a-password-1")
    rank_good_over_bad(db, "ann", ["first", "second", "third"])
    db.conn.close()
    studio = own_task.Studio(Path(db_path), "default", tmp_path)
    assert own_task.ranked_answers(studio) == 6  # 3 rankings of 2 answers
