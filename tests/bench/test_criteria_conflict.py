"""bench/criteria_conflict.py's pure parts (the run's reward specs, the verdicts, the table, the people's criterion
ratings) and the explain task's two judges, which must pull apart (issue 47, item 5)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench scripts import their siblings by plain name

import criteria_conflict as bench  # noqa: E402
from bench.tasks import TASKS  # noqa: E402
from bench.tasks.explain import judge as explain  # noqa: E402
from rlhf.stats import WinRate  # noqa: E402

QUESTION = "How do I change a flat tyre on a car?"
TERSE = "Call a mechanic."  # 3 words: short, covers nothing
THOROUGH = ("Loosen the nuts, jack up the car, remove the wheel, fit the spare, tighten the nuts in a star pattern "
            "and lower the car. Check the pressure of the spare afterwards and get the flat repaired soon.")  # 37 words


def test_the_two_judges_pull_apart():
    # complete: 0.4 * coverage + 0.6 * min(1, points / 20). TERSE: no key term of the question (change, flat, tyre,
    # car), 2 points (call, mechanic): 0.6 * 2 / 20 = 0.06. THOROUGH: 2 of 4 key terms (car, flat), 16 points
    # (loosen, nut, jack, remove, wheel, fit, spare, tighten, star, pattern, lower, check, pressure, afterward,
    # repair, soon): 0.4 * 0.5 + 0.6 * 16 / 20 = 0.68.
    assert explain.complete([QUESTION] * 2, [TERSE, THOROUGH]) == pytest.approx([0.06, 0.68])
    # short: 1 up to 15 words, then 1 - (n - 15) / 45: THOROUGH's 37 words give 1 - 22 / 45 = 0.5111.
    assert explain.short([QUESTION] * 2, [TERSE, THOROUGH]) == pytest.approx([1.0, 1 - 22 / 45])
    # Saying nothing meets neither: a constraint on shortness is not met by empty answers.
    assert explain.complete([QUESTION], [""]) == [0.0] and explain.short([QUESTION], [""]) == [0.0]
    assert explain.judge([QUESTION], [TERSE]) == pytest.approx([(0.06 + 1.0) / 2])
    assert set(explain.CRITERIA) == {"complete", "short"} and "explain" in TASKS
    with pytest.raises(ValueError, match="one prompt per answer"):
        explain.short([QUESTION], [TERSE, THOROUGH])


def test_the_runs_reward_specs_parse_as_a_sum_a_constraint_and_one_model():
    from labeler.services.settings import reward_spec

    specs = bench.reward_specs("complete", "short", 0.7, 0.0, {"complete": "rm-complete", "short": "rm-short"})
    assert specs == {"sum": "rm:rm-complete*0.7+rm:rm-short*0.3", "constraint": "rm:rm-complete,rm:rm-short>=0",
                     "single": "rm:rm-complete"}
    constrained = reward_spec.parse(specs["constraint"]).combined
    assert constrained.constraint == reward_spec.Constraint(reward_spec.RewardSpec("rm", model="rm-short"), 0.0)
    assert reward_spec.parse(specs["sum"]).combined.terms[1][1] == pytest.approx(0.3)
    assert reward_spec.parse(specs["single"]) == reward_spec.RewardSpec("rm", model="rm-complete")
    # --maximise short --threshold base (the default): brevity maximised, completeness held at the base's level.
    swapped = bench.reward_specs("short", "complete", 0.5, "base", {"complete": "rm-complete", "short": "rm-short"})
    assert swapped["constraint"] == "rm:rm-short,rm:rm-complete>=base" and swapped["single"] == "rm:rm-short"
    assert reward_spec.parse(swapped["constraint"]).combined.constraint.threshold is None
    assert bench.level("base") == "base" and bench.level("-0.5") == -0.5


def win(rate, low, high):
    return WinRate(rate, low, high, 0, 0, 0, 10)


def test_a_constraint_holds_when_its_interval_reaches_half_and_a_criterion_improves_above_it():
    row = bench.Row("constraint", "rm:a,rm:b>=0", {"complete": win(0.7, 0.55, 0.82), "short": win(0.45, 0.3, 0.6)},
                    constrained="short")
    assert row.verdicts() == {"complete": "improved", "short": "held"}
    row = bench.Row("constraint", "rm:a,rm:b>=0", {"complete": win(0.6, 0.45, 0.72), "short": win(0.3, 0.2, 0.49)},
                    constrained="short")
    assert row.verdicts() == {"complete": "not improved", "short": "NOT held"}
    # Without a constraint, each criterion is improved or not.
    assert bench.Row("single", "rm:a", {"short": win(0.3, 0.2, 0.49)}).verdicts() == {"short": "not improved"}


def test_the_table_has_a_row_per_run_and_a_column_per_criterion():
    rows = [bench.Row("sum", "rm:a*0.5+rm:b*0.5", {"complete": win(0.7, 0.55, 0.82), "short": win(0.5, 0.4, 0.6)},
                      app_wins={"complete": (0.65, 0.5, 0.78)}, length_base=40, length=55, kl=1.234),
            bench.Row("constraint", "rm:a,rm:b>=0", {"complete": win(0.6, 0.52, 0.7), "short": win(0.45, 0.3, 0.6)},
                      constrained="short", length_base=40, length=42, kl=0.5, multiplier=0.25)]
    table = bench.format_table("explain", rows)
    lines = table.splitlines()
    assert lines[0] == "### explain"
    assert lines[2].startswith("| run | reward | complete: judge's win rate (95% CI) | short: judge's win rate")
    assert lines[4] == ("| sum | `rm:a*0.5+rm:b*0.5` | 70% (55%-82%) improved | 50% (40%-60%) not improved | "
                        "65% (50%-78%) | - | 40 -> 55 | 1.23 | - |")
    assert lines[5] == ("| constraint | `rm:a,rm:b>=0` | 60% (52%-70%) improved | 45% (30%-60%) held | - | - | "
                        "40 -> 42 | 0.50 | 0.250 |")


def test_judge_rows_compare_each_criterion_pair_by_pair():
    # Two prompts, one sample each: the tuned answers are longer. complete: both tuned win (2 wins of 2);
    # short: THOROUGH (0.51) loses to TERSE (1.0), and TERSE against TERSE ties.
    prompts = [QUESTION, QUESTION]
    row = bench.judge_row("single", "rm:a", prompts, [TERSE, TERSE], [THOROUGH, TERSE], 1, explain.CRITERIA)
    assert (row.judge_wins["complete"].wins, row.judge_wins["complete"].ties) == (1, 1)
    assert (row.judge_wins["short"].losses, row.judge_wins["short"].ties) == (1, 1)
    assert row.judge_wins["complete"].rate == pytest.approx(0.75)
    assert row.judge_wins["short"].rate == pytest.approx(0.25)


def test_people_rate_each_criterion_on_its_scale():
    # [0, 1] onto 1..5: 0 -> 1, 0.5 -> 3, 1 -> 5, 0.8 -> 1 + 0.8 * 4 = 4.2 -> 4.
    assert bench.criterion_ratings({"complete": 0.8, "short": 0.0}) == {"complete": 4, "short": 1}
    assert bench.criterion_ratings({"short": 0.5}, (1, 5)) == {"short": 3}


def test_reuse_reads_the_kept_reward_models_and_names_the_missing_one(tmp_path):
    from own_task import Studio
    from storage import open_db

    studio = Studio(tmp_path / "studio.db", "explain", tmp_path)
    with pytest.raises(SystemExit, match="no database at"):
        bench.kept_reward_models(studio, ["complete", "short"])
    db = open_db(str(studio.db))
    db.execute("INSERT INTO models (name, path, kind) VALUES ('rm-complete', '/x', 'reward')")
    db.conn.commit()
    with pytest.raises(SystemExit, match="no reward model for short"):
        bench.kept_reward_models(studio, ["complete", "short"])
    db.execute("INSERT INTO models (name, path, kind) VALUES ('rm-short', '/y', 'reward')")
    db.conn.commit()
    db.conn.close()
    assert bench.kept_reward_models(studio, ["complete", "short"]) == ({"complete": "rm-complete",
                                                                        "short": "rm-short"}, 0)


def test_the_extra_evaluation_prompts_are_new_how_to_questions():
    """heldout_more.txt is evaluation-only: none of its questions is one the recipe generates for or trains on."""
    extra = (ROOT / "bench/tasks/explain/heldout_more.txt").read_text().splitlines()
    task = (ROOT / "bench/tasks/explain/prompts.txt").read_text().splitlines()
    assert len(extra) == len(set(extra)) == 120 and not set(extra) & set(task)
    assert all(line.endswith("?") and line.split()[0] in ("How", "What") for line in extra)


def test_evaluate_on_refuses_a_run_the_earlier_results_do_not_have(tmp_path):
    import json
    from types import SimpleNamespace

    from storage import open_db

    db = open_db(str(tmp_path / "studio.db"))
    db.execute("INSERT INTO models (name, path, kind) VALUES ('rm-complete', '/x', 'reward'), "
               "('rm-short', '/y', 'reward')")
    db.conn.commit()
    db.conn.close()
    (tmp_path / "results-short.json").write_text(json.dumps([{"run": "single", "run_id": 1, "model": "ppo-run1",
                                                              "reward": "rm:rm-short"}]))
    args = SimpleNamespace(maximise="short", results="", runs=["constraint", "single"], evaluate_on="x.txt",
                           win_margin=0.0)
    with pytest.raises(SystemExit, match=r"has no constraint run \(it has single\)"):
        bench.evaluate_wider(args, tmp_path)
