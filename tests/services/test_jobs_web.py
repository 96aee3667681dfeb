"""Settings the Train tab may not set (issue 10): code to import, folders to write, hub credentials."""
from __future__ import annotations

import pytest

from labeler.services.training import jobs
from labeler.errors import InputError


@pytest.mark.parametrize(
    "stage, settings, field",
    [
        ("sft", {"runner": "toy_runner:run"}, "runner"),
        ("ppo", {"reward": "function", "reward_function": "os:system"}, "reward_function"),
        ("sft", {"output_dir": "/etc/cron.d"}, "output_dir"),
        ("dpo", {"hub_model_id": "someone/model"}, "hub_model_id"),
        ("rm", {"push_to_hub": True}, "push_to_hub"),
    ],
)
def test_the_web_cannot_set_cli_only_settings_and_nothing_is_written(db, tmp_path, stage, settings, field):
    with pytest.raises(InputError, match="only be set from the command line") as error:
        jobs.create_run(db, stage, settings, runs_dir=str(tmp_path), start=False, from_web=True)
    assert error.value.field == field
    assert db["runs"].count == 0
    # The command line keeps them (the same call without from_web queues the run).
    assert jobs.create_run(db, stage, settings, runs_dir=str(tmp_path), start=False).status == "queued"


def test_the_web_keeps_the_built_in_reward_functions(db, tmp_path):
    run = jobs.create_run(db, "ppo", {"reward": "function", "reward_function": "vader-with-prompt"},
                          runs_dir=str(tmp_path), start=False, from_web=True)
    assert run.status == "queued"
