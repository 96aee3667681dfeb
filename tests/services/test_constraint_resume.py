"""A PPO run under a constraint keeps its Lagrange multiplier across a resume, and takes the multiplier's step size
as the setting constraint_lr (issue 47)."""
import json
from pathlib import Path

import pytest

from labeler.services.execution import checkpoints, run_metrics, runs
from labeler.services.training import jobs
from labeler.services.data import prompts
from labeler.errors import InputError

# Reward 0, constraint -1 on every answer (tests/services/constraint_scores.py): the constraint >=0 is broken by
# exactly 1 on every batch, so the multiplier after batch k is k * constraint_lr, whatever the policy answers.
REWARD = "constraint_scores:zero,constraint_scores:minus_one>=0"


@pytest.mark.slow
def test_a_resumed_run_goes_on_from_the_saved_multiplier(db, tmp_path, tiny_model_dir, monkeypatch, capsys):
    from labeler.services.training.runners import ppo as ppo_runner
    from labeler.worker import run_worker

    prompts.add_prompts(db, ["The first scene", "The ending"])
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 2, "batch_size": 2, "reward": REWARD,
                                      "constraint_lr": 0.25, "answers_per_prompt": 1, "mini_batch_size": 2,
                                      "ppo_epochs": 1, "max_new_tokens": 3, "checkpoint_every": 1,
                                      "eval_samples": 0, "heldout_every": 0},
                          runs_dir=tmp_path / "runs", start=False)
    assert runs.get_run(db, run.id).config["job"]["constraint_lr"] == 0.25
    real_step = ppo_runner.ppo_step

    def dies_in_step_2(trainer, batch, stats, overlap):
        if trainer.current_step == 1:
            raise RuntimeError("the machine went down")
        return real_step(trainer, batch, stats, overlap)

    monkeypatch.setattr(ppo_runner, "ppo_step", dies_in_step_2)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "failed"
    root = Path(run.output_dir) / "checkpoints"
    assert [checkpoints.checkpoint_step(c) for c in checkpoints.complete_checkpoints(root)] == [1]
    # One batch 1 below the threshold: 0 + 0.25 * (0 - (-1)) = 0.25, saved beside the weights (not a model file).
    checkpoint = root / "checkpoint-1"
    assert json.loads((checkpoint / checkpoints.REWARD_STATE_FILE).read_text()) == {"lagrange_multiplier": 0.25}
    assert checkpoints.REWARD_STATE_FILE not in [p.name for p in checkpoints.model_files(checkpoint)]

    monkeypatch.setattr(ppo_runner, "ppo_step", real_step)
    db.execute("UPDATE runs SET status = 'running', error = '' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))
    logged = dict(db.execute("SELECT step, value FROM metrics WHERE run_id = ? AND name = ?",
                             [run.id, "reward/lagrange_multiplier"]).fetchall())
    # Step 2 after the resume: 0.25 + 0.25 * 1 = 0.5 (restarted at 0 it would read 0.25 again).
    assert logged == pytest.approx({1: 0.25, 2: 0.5})
    assert "reward state restored from checkpoint-1: {'lagrange_multiplier': 0.25}" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["0", "-0.1", "nan", "fast"])
def test_a_step_size_that_is_not_a_positive_number_is_refused(db, tmp_path, bad):
    prompts.add_prompts(db, ["The first scene"])
    with pytest.raises(InputError, match="constraint_lr") as refused:
        jobs.create_run(db, "ppo", {"reward": REWARD, "constraint_lr": bad}, runs_dir=tmp_path / "runs",
                        start=False)
    assert refused.value.field == "constraint_lr"
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_the_step_size_defaults_to_the_app_s(db, tmp_path):
    from labeler.services.training.criteria_reward import combined_reward
    from labeler.services.settings.job_settings import JobConfig

    job = JobConfig(reward="rm", reward_model=REWARD)
    assert job.constraint_lr == 1.0
    assert combined_reward(db, job).learning_rate == 1.0
    from labeler import forms
    assert combined_reward(db, forms.build_config(JobConfig, {"reward": "rm", "reward_model": REWARD,
                                                              "constraint_lr": "0.5"})).learning_rate == 0.5


def test_the_web_form_may_set_the_step_size(db, tmp_path):
    # a number, naming no code: the Train tab's More settings may send it as the command line does
    from labeler.services.data import accounts

    prompts.add_prompts(db, ["The first scene"])
    accounts.create_user(db, "boss", "a long enough password", role="admin")
    run = jobs.create_run(db, "ppo", {"reward": "vader", "constraint_lr": "0.5"}, runs_dir=tmp_path / "runs",
                          start=False, from_web=True, username="boss")
    assert run.config["job"]["constraint_lr"] == 0.5
