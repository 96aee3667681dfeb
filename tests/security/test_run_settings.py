"""What a run's settings may hold (issue 25): the web Train form accepts an allowlist (a denylist with gaps let
PPO's log_dir, project_kwargs and accelerator_kwargs through, and the worker wrote to that folder), and secrets
are never stored in a run's config (`train --set hub_token=...` was kept in plain text): the libraries read them
from the environment.
"""
from __future__ import annotations

import pytest

from labeler.cli import main
from labeler.services.training import jobs, train_configs
from labeler.errors import InputError

pytestmark = pytest.mark.reliability


@pytest.mark.parametrize("stage, settings, field", [
    ("ppo", {"log_dir": "/tmp/elsewhere"}, "log_dir"),
    ("ppo", {"project_kwargs": '{"logging_dir": "/tmp/elsewhere"}'}, "project_kwargs"),
    ("ppo", {"accelerator_kwargs": '{"project_dir": "/tmp/elsewhere"}'}, "accelerator_kwargs"),
    ("ppo", {"log_with": "tensorboard"}, "log_with"),
    ("sft", {"report_to": "wandb"}, "report_to"),
    ("dpo", {"push_to_hub": True, "learning_rate": 1e-5}, "push_to_hub"),
    ("sft", {"runner": "os:system"}, "runner"),
    ("ppo", {"reward": "function", "reward_function": "os:system"}, "reward_function"),
])
def test_the_web_form_refuses_what_is_not_on_its_allowlist(db, tmp_path, stage, settings, field):
    with pytest.raises(InputError, match="only be set from the command line") as error:
        jobs.create_run(db, stage, settings, runs_dir=str(tmp_path), start=False, from_web=True)
    assert error.value.field == field
    assert db["runs"].count == 0


def test_everything_the_train_form_sends_is_on_the_allowlist(db, tmp_path):
    from labeler.ui.tabs.train import form

    specs = form.form_specs()
    for stage in train_configs.STAGES:
        sent = {spec.name for spec in specs["job"] + specs[stage]} | {"model"}
        assert "runner" not in sent and "accelerate_config" not in sent  # code to import, a file to read
        assert sent <= train_configs.web_settings(stage), (stage, sent - train_configs.web_settings(stage))
    # The "More settings" box's own example, and a run with form values, are accepted.
    run = jobs.create_run(db, "sft", {"warmup_steps": "5", "weight_decay": "0.01", "steps": "3"},
                          runs_dir=str(tmp_path), start=False, from_web=True)
    assert run.config["trainer"]["warmup_steps"] == 5 and run.config["job"]["steps"] == 3


@pytest.mark.parametrize("stage, settings, field", [
    ("dpo", {"hub_token": "hf_not_a_real_token"}, "hub_token"),
    ("ppo", {"tracker_kwargs": '{"wandb": {"api_key": "0123456789abcdef"}}'}, "tracker_kwargs.wandb.api_key"),
    ("ppo", {"tracker_kwargs": {"mlflow": {"tracking_token": "t"}}}, "tracker_kwargs.mlflow.tracking_token"),
    # Issue 36 item 7: these landed in runs.config_json.
    ("ppo", {"tracker_kwargs": '{"wandb": {"key": "0123456789abcdef"}}'}, "tracker_kwargs.wandb.key"),
    ("ppo", {"tracker_kwargs": '{"mlflow": {"pwd": "hunter2"}}'}, "tracker_kwargs.mlflow.pwd"),
    ("ppo", {"project_kwargs": '{"passphrase": "open sesame"}'}, "project_kwargs.passphrase"),
    ("ppo", {"accelerator_kwargs": '{"private_key": "-----BEGIN"}'}, "accelerator_kwargs.private_key"),
])
def test_secrets_are_never_stored_with_a_run(db, tmp_path, stage, settings, field):
    with pytest.raises(InputError, match="a secret is never stored with a run: set it in the environment") as error:
        jobs.create_run(db, stage, settings, runs_dir=str(tmp_path), start=False)
    assert error.value.field == field
    assert db["runs"].count == 0


def test_the_cli_refuses_a_hub_token_in_one_line(db_path, capsys):
    from storage import open_db

    open_db(db_path).conn.close()
    assert main(["train", "dpo", "--set", "hub_token=hf_not_a_real_token", "--db", db_path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hub_token" in err[0] and "HF_TOKEN" in err[0] and "hf_not_a_real_token" not in err[0]
    assert open_db(db_path)["runs"].count == 0


def test_a_dry_run_refuses_secrets_as_a_run_does_and_names_the_config_file(db_path, tmp_path, capsys):
    """Issue 36 item 7: `--dry-run` accepted what a real run refuses, and with --config its unknown-setting error
    did not name the file."""
    from storage import open_db

    open_db(db_path).conn.close()
    code = main(["train", "ppo", "--dry-run", "--db", db_path,
                 "--set", 'tracker_kwargs={"wandb": {"key": "0123456789abcdef"}}'])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "tracker_kwargs.wandb.key" in err[0] and "never stored" in err[0] and "0123456789abcdef" not in err[0]
    config = tmp_path / "job.json"
    config.write_text('{"steps": 2, "no_such_setting": 1}', encoding="utf-8")
    for extra in (["--dry-run"], []):
        code = main(["train", "sft", "--db", db_path, "--config", str(config), *extra])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "job.json" in err[0] and "no_such_setting" in err[0], (extra, err)
    assert open_db(db_path)["runs"].count == 0


def test_ordinary_settings_are_not_taken_for_secrets():
    from labeler.services.settings.run_secrets import secret_paths

    assert secret_paths({"steps": 3, "max_new_tokens": 16, "reward": "vader", "kl_coef": 0.1,
                         "tracker_kwargs": {"wandb": {"project": "p", "monkey": "m", "keyboard": "k"}},
                         "generation_kwargs": {"pad_token_id": 0, "private": True}}) == []
    assert secret_paths({"tracker_kwargs": {"wandb": {"apiKey": "x"}, "hub": {"Private-Key": "y"}}}) == [
        "tracker_kwargs.wandb.apiKey", "tracker_kwargs.hub.Private-Key"]
