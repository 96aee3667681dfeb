"""The trainers on labels (sft, rm, dpo, kto) fit their max_length to the project's answer length (issue 45 item 3):
the prompt budget + the answer length + the end-of-turn room unless a value is set, stored with the run as an app
default, and the same in the trainer config its runner builds."""
from __future__ import annotations

import pytest
from export_fixtures import build_labelled_db

from labeler.services.training import jobs, run_settings, train_configs
from labeler.services.data import projects
from labeler.services.training.runners.common import trainer_args
from labeler.services.training.stages import StageContext
from labeler.services.settings.training_stages.base import END_OF_TURN_ROOM, PROMPT_BUDGET

STAGES = ("rm", "dpo", "kto")  # they score the model's answers; SFT keeps a floor (below)


@pytest.fixture
def labelled(db):
    build_labelled_db(db)
    projects.update_project(db, "default", answer_tokens=64)
    return db


def runner_config(stage: str, run, output_dir):
    ctx = StageContext(run.id, "unused.db", stage, "default", train_configs.load_job_config(run.config),
                       dict(run.config["trainer"]), output_dir, sink=None)
    return trainer_args(ctx, stage)


@pytest.mark.parametrize("stage", STAGES)
def test_max_length_follows_the_projects_answer_length(labelled, tmp_path, stage):
    assert (PROMPT_BUDGET, END_OF_TURN_ROOM) == (256, 8)
    run = jobs.create_run(labelled, stage, {}, runs_dir=tmp_path / "runs", start=False)
    assert run.config["trainer"]["max_length"] == 256 + 64 + 8 == 328  # not the class default 512
    assert runner_config(stage, run, tmp_path / "out").max_length == 328
    resolved = run_settings.resolve_run(labelled, "default", stage, {})  # what the preview shows
    assert resolved.config == run.config
    assert resolved.source("max_length") == "app default"
    # a longer answer length, a longer max_length (not a number fixed at 64)
    projects.update_project(labelled, "default", answer_tokens=200)
    assert run_settings.resolve_run(labelled, "default", stage, {}).config["trainer"]["max_length"] == 256 + 200 + 8


@pytest.mark.parametrize("stage", STAGES)
def test_a_set_max_length_or_answer_length_is_kept(labelled, tmp_path, stage):
    run = jobs.create_run(labelled, stage, {"max_length": 100}, runs_dir=tmp_path / "runs", start=False)
    assert run.config["trainer"]["max_length"] == 100
    assert runner_config(stage, run, tmp_path / "out").max_length == 100
    assert run_settings.resolve_run(labelled, "default", stage, {"max_length": 100}).source("max_length") == "typed"
    # a typed answer length is the one the sequences are fitted to (for the reward model too)
    typed_answers = run_settings.resolve_run(labelled, "default", stage, {"max_new_tokens": 32})
    assert typed_answers.config["trainer"]["max_length"] == 256 + 32 + 8


def test_dpo_fits_max_length_to_its_own_prompt_budget(labelled):
    resolved = run_settings.resolve_run(labelled, "default", "dpo", {"max_prompt_length": 128})
    assert resolved.config["trainer"]["max_length"] == 128 + 64 + 8
    assert resolved.trainer_config().max_prompt_length == 128


def test_sft_follows_a_long_answer_length_up_but_never_below_its_own_512(labelled, tmp_path):
    # SFT trains on people's written answers too, which the model's answer length does not bound
    run = jobs.create_run(labelled, "sft", {}, runs_dir=tmp_path / "runs", start=False)
    assert run.config["trainer"]["max_length"] == 512  # 256 + 64 + 8 = 328 would cut a long written answer
    assert runner_config("sft", run, tmp_path / "out").max_length == 512
    projects.update_project(labelled, "default", answer_tokens=400)
    assert run_settings.resolve_run(labelled, "default", "sft", {}).config["trainer"]["max_length"] == 256 + 400 + 8
    assert run_settings.resolve_run(labelled, "default", "sft", {"max_length": 100}).config["trainer"]["max_length"] == 100
