"""During a PPO run the held-out prompts are answered every heldout_every steps and their positive share and mean
reward logged at that step, scored as the final evaluation scores them (here: the run's reward function)."""
from labeler.services.training import jobs
from labeler.services.data import prompts
from labeler.services.execution import run_metrics, runs
from labeler.worker import run_worker


def test_heldout_positive_share_is_logged_during_the_run(db, tmp_path, tiny_model_dir):
    prompts.add_prompts(db, ["A training prompt", "Another one"])
    prompts.add_prompts(db, ["A held-out prompt", "Another held-out one", "A third"])
    db.execute("UPDATE prompts SET split = 'test' WHERE text IN ('A held-out prompt', 'Another held-out one', 'A third')")
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 3, "reward": "function",
                                      "reward_function": "eval_rewards:words", "batch_size": 2, "answers_per_prompt": 1,
                                      "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 4, "checkpoint_every": 0,
                                      "eval_samples": 0, "heldout_every": 1},
                          runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))
    frame = run_metrics.metrics_frame(db, run.id, ["eval/positive_share", "eval/reward_mean"])
    rows = {(r.name, int(r.step)): r.value for r in frame.itertuples()}
    # Steps 1 and 2 checked (not 3: the last step is the full evaluation's, off here); words/4 of 4 tokens <= 1.
    assert sorted(rows) == [("eval/positive_share", 1), ("eval/positive_share", 2),
                            ("eval/reward_mean", 1), ("eval/reward_mean", 2)]
    assert all(0.0 <= v <= 1.0 for v in rows.values())
