"""The demo loop at toy size: tiny policy and encoder, a few prompts, one PPO step, real worker processes."""
from __future__ import annotations

import pytest

from labeler.services.data import accounts, labeling
from labeler.services.execution import launch, runs
from labeler.services.training.demo import (ANNOTATOR, DEMO_PROJECT, DemoSettings, demo_lock, demo_running, run_demo,
                                            simulate_annotator, tie_groups)
from labeler.errors import InputError


def test_simulated_annotator_ranks_by_sentiment(db):
    prompt_id = db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (1, 'The film', 'h')").lastrowid
    ids = [db.execute("INSERT INTO responses (prompt_id, text) VALUES (?, ?)", [prompt_id, t]).lastrowid
           for t in ("was a horrible, boring waste", "was wonderful and beautiful", "was wonderful and beautiful!",
                     "was fine, I guess")]
    labeling.create_items(db, "default", ranking_size=4)
    assert simulate_annotator(db, "default", noise=0.0, seed=0) == 1
    order = db.execute("SELECT order_json FROM rankings").fetchone()[0]
    import json

    order = json.loads(order)
    # VADER of the answer: 0.8356 and 0.8225 are within 0.1, a tie; then "fine" (0.20), then -0.82.
    assert [sorted(group) for group in order] == [sorted([ids[1], ids[2]]), [ids[3]], [ids[0]]]
    assert db.execute("SELECT username FROM users").fetchone()[0] == ANNOTATOR
    # The account exists for its labels only: deactivated once it has labelled, so nobody can log in as it.
    assert accounts.get_user(db, ANNOTATOR).active is False


def test_tie_groups_tie_answers_within_the_margin_of_their_groups_best():
    # 0.351 and 0.349 straddle a rounding boundary (0.4 vs 0.3) but are a tie; 0.26 is 0.091 below the group's
    # best, still a tie; 0.25 is 0.101 below it and starts the next group, which 0.2 joins; -0.5 is alone.
    ids = [1, 2, 3, 4, 5, 6]
    scores = [0.349, -0.5, 0.26, 0.351, 0.25, 0.2]
    assert tie_groups(ids, scores, 0.1) == [[4, 1, 3], [5, 6], [2]]
    assert tie_groups(ids, scores, 0.0) == [[4], [1], [3], [5], [6], [2]]


def test_simulated_annotator_password_is_random_not_seeded(db):
    # The old password was f"sim-{random.Random(seed).getrandbits(64):x}": computable from the default seed.
    import random

    simulate_annotator(db, "default", noise=0.0, seed=0)
    first = db.execute("SELECT password_hash, salt FROM users WHERE username = ?", [ANNOTATOR]).fetchone()
    assert accounts.hash_password(f"sim-{random.Random(0).getrandbits(64):x}", first["salt"]) != first["password_hash"]
    # Reactivated for the next run with a new password; even a correct old password would not log in meanwhile.
    simulate_annotator(db, "default", noise=0.0, seed=0)
    second = db.execute("SELECT password_hash FROM users WHERE username = ?", [ANNOTATOR]).fetchone()[0]
    assert second != first["password_hash"]
    assert accounts.get_user(db, ANNOTATOR).active is False


def test_one_demo_at_a_time(db_path):
    assert not demo_running(db_path)
    with demo_lock(db_path):
        assert demo_running(db_path)
        with pytest.raises(InputError, match="a demo is already running"):
            run_demo(db_path, DemoSettings())
        with pytest.raises(InputError, match="already running"):
            from labeler.services.training.demo import launch_demo_process

            launch_demo_process(db_path, out_dir=str(__import__("pathlib").Path(db_path).parent / "demo"))
    assert not demo_running(db_path)  # released when the demo ends


def test_the_demo_never_runs_in_the_default_project(db_path):
    with pytest.raises(InputError, match="'default' project"):
        run_demo(db_path, DemoSettings(), project="default")


def test_a_failed_demo_deactivates_the_annotator(db, db_path, tmp_path):
    # An unknown policy fails at generation, before anything is labelled; the account is left active first (as
    # a demo killed mid-labelling by an older version could have left it), and the failed demo must close it.
    accounts.create_user(db, ANNOTATOR, "x" * 12)
    with pytest.raises(Exception):
        run_demo(db_path, DemoSettings(prompts=1, heldout=1, answers=1, policy="no-such-model",
                                       out_dir=str(tmp_path / "demo")), log=lambda line: None)
    assert accounts.get_user(db, ANNOTATOR).active is False
    # Its own project, created with the shipped prompts; the default project is untouched.
    assert db.execute("SELECT COUNT(*) FROM prompts p JOIN projects j ON j.id = p.project_id WHERE j.name = ?",
                      [DEMO_PROJECT]).fetchone()[0] == 135
    assert db.execute("SELECT COUNT(*) FROM prompts p JOIN projects j ON j.id = p.project_id"
                      " WHERE j.name = 'default'").fetchone()[0] == 0


def test_tiny_demo_runs_the_whole_loop(db, db_path, tmp_path, tiny_model_dir, tiny_encoder_dir, monkeypatch):
    monkeypatch.setenv(launch.LAUNCHER_ENV, "python")
    settings = DemoSettings(prompts=4, heldout=2, answers=2, rm_steps=2, ppo_steps=1, ppo_batch_size=2, ppo_answers_per_prompt=2, ppo_mini_batch_size=2,
                            ppo_epochs=1, max_new_tokens=4, bf16=False, noise=0.1, policy=str(tiny_model_dir),
                            encoder=str(tiny_encoder_dir), out_dir=str(tmp_path / "demo"), eval_samples=1)
    lines = []
    report = run_demo(db_path, settings, log=lines.append)
    assert [runs.get_run(db, i).status for i in (report.rm_run, report.ppo_run)] == ["succeeded", "succeeded"]
    # Everything lives in the demo's own project; the default project got nothing.
    demo_id = db.execute("SELECT id FROM projects WHERE name = ?", [DEMO_PROJECT]).fetchone()[0]
    assert {row[0] for row in db.execute("SELECT DISTINCT project_id FROM prompts")} == {demo_id}
    assert {row[0] for row in db.execute("SELECT DISTINCT project_id FROM runs")} == {demo_id}
    assert accounts.get_user(db, ANNOTATOR).active is False
    assert not demo_running(db_path)
    # The shipped set's fixed held-out fifth is the comparison set, and nothing was generated for it.
    held = [row[0] for row in db.execute("SELECT id FROM prompts WHERE split = 'test'")]
    assert len(held) == 27
    assert db.execute(f"SELECT COUNT(*) FROM responses WHERE prompt_id IN ({', '.join(map(str, held))})").fetchone()[0] == 0
    assert len(report.rows) == 27 and report.samples == 1
    assert set(report.rows[0]) >= {"query", "before", "after", "reward_before", "reward_after"}
    # 4 training prompts x 2 answers, one ranking each (the noise breaks the random model's VADER ties).
    assert db.execute("SELECT COUNT(*) FROM rankings").fetchone()[0] == 4
    # The table is the PPO run's own automatic evaluation (base and tuned policy), reused, not redone.
    before, after = report.evaluations
    assert (before.model, after.model, after.run_id) == (str(tiny_model_dir), f"ppo-run{report.ppo_run}", report.ppo_run)
    assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 2
    assert [row["vader_after"] for row in report.rows] == [row["reward"] for row in after.samples]
    table = report.table()
    assert "mean" in table and "median" in table and report.rows[0]["query"][:20] in table
    assert "distinct-2" in table and f"ppo-run{report.ppo_run}" in table
    assert any("reward model" in line for line in lines)


def test_a_project_without_heldout_prompts_gets_some(db):
    from labeler.services.data import prompts
    from labeler.services.training.demo import _split_prompts

    prompts.add_prompts(db, [f"prompt {i}" for i in range(10)])
    heldout, train = _split_prompts(db, "default", DemoSettings(heldout=3, prompts=4))
    assert len(heldout) == 3 and len(train) == 4 and not set(heldout) & set(train)
    assert sorted(row[0] for row in db.execute("SELECT id FROM prompts WHERE split = 'test'")) == heldout
    # Once there is a test split, it is used as it is.
    assert _split_prompts(db, "default", DemoSettings(heldout=5))[0] == heldout


def test_report_summary_mean_and_median_of_each_column():
    from labeler.services.training.demo import DemoReport

    values = {"reward_before": [1.0, 2.0, 6.0], "reward_after": [0.5, -0.5, 3.0],
              "vader_before": [0.0, 0.0, 0.3], "vader_after": [-1.0, 1.0, 0.4]}
    rows = [{name: column[i] for name, column in values.items()} for i in range(3)]
    summary = DemoReport(rows, {}, 1, 2, {}).summary()
    # reward_before: (1 + 2 + 6) / 3 = 3, median 2; reward_after: (0.5 - 0.5 + 3) / 3 = 1, median 0.5;
    # vader_before: 0.3 / 3 = 0.1, median 0; vader_after: 0.4 / 3 = 0.1333, median 0.4
    assert summary == pytest.approx({
        "reward_before_mean": 3.0, "reward_before_median": 2.0, "reward_after_mean": 1.0, "reward_after_median": 0.5,
        "vader_before_mean": 0.1, "vader_before_median": 0.0, "vader_after_mean": 0.4 / 3, "vader_after_median": 0.4,
    })

