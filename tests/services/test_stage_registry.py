"""The stage registry (issue 35 item 1): every stage is offered where a run is started, previews the rows its runner
reads, and stores the config it runs with."""
from __future__ import annotations

import argparse
from pathlib import Path

import gradio as gr
import pytest
from export_fixtures import build_labelled_db

from labeler.cli import build_parser
from labeler.services.settings import job_settings, training_stages
from labeler.services.training import jobs, run_preview, run_settings, train_configs
from labeler.errors import InputError
from labeler.services.training.stages import StageContext

STAGE_NAMES = list(training_stages.NAMES)


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def test_every_stage_is_offered_by_the_cli_and_the_train_form():
    from labeler.ui.tabs.train import form

    assert STAGE_NAMES == ["sft", "rm", "dpo", "ppo", "grpo", "rloo", "kto", "online-dpo"]
    stage_arg = next(a for a in _subparser(build_parser(), "train")._actions if a.dest == "stage")
    assert list(stage_arg.choices) == STAGE_NAMES
    with gr.Blocks():
        launch = form.build_form()
    assert [value for _, value in launch.stage.choices] == STAGE_NAMES
    # The radio shows each stage's own label; its trainer group is built from its own form fields.
    assert dict((value, label) for label, value in launch.stage.choices)["kto"] == "Learn from good/bad labels (KTO)"
    assert set(launch.stage_groups) == set(STAGE_NAMES)
    assert [spec.name for spec in launch.specs_by_stage["ppo"]] == list(training_stages.get("ppo").form_fields)


def test_the_settings_ground_floor_names_the_same_stages():
    # job_settings imports no export code, so it keeps the names itself: this is what keeps the two in step.
    assert job_settings.ALL_STAGES == training_stages.NAMES
    assert job_settings.RewardSettings.STAGES == training_stages.names(samples=True)
    assert {name: job_settings.JobConfig().base_model(name) for name in STAGE_NAMES} == \
        {name: stage.default_model for name, stage in training_stages.STAGES.items()}
    with pytest.raises(InputError) as error:
        training_stages.get("ppo2")
    assert error.value.field == "stage" and "sft, rm, dpo, ppo, grpo, rloo, kto, online-dpo" in error.value.message


class RowsRead(Exception):
    """Raised by ReadingContext once the runner has read its rows: nothing is trained."""


class ReadingContext(StageContext):
    """A StageContext that records the rows (or prompts) the runner freezes, its first use of them, and stops."""

    def frozen_rows(self, name: str, rows: list) -> list:
        self.read = (name, rows)
        raise RowsRead()


def _text(value) -> str:
    """A prompt or an answer as text: a conversation's last message (the runner's rows for a chat model)."""
    return value[-1]["content"] if isinstance(value, list) else value


def _identity(row: dict) -> tuple:
    return tuple(_text(row[key]) if key in ("prompt", "completion", "chosen", "rejected") else row[key]
                 for key in sorted(row) if key in ("prompt", "completion", "chosen", "rejected", "label"))


def _rows_the_runner_reads(db_path: str, run, tmp_path: Path) -> list:
    ctx = ReadingContext(run_id=run.id, db_path=db_path, stage=run.stage, project=run.project,
                         job=train_configs.load_job_config(run.config), trainer_settings=dict(run.config["trainer"]),
                         output_dir=tmp_path / run.stage, sink=None)
    with pytest.raises(RowsRead):
        training_stages.get(run.stage).run(ctx)
    return ctx.read[1]


@pytest.mark.parametrize("stage", STAGE_NAMES)
def test_the_preview_counts_the_rows_the_runner_reads(db, db_path, tmp_path, stage):
    build_labelled_db(db)
    # Filters that drop some labels (alice's and bob's only, no rating pairs): a preview of every label would differ.
    values = {"annotators": "alice,bob", "include_rating_pairs": False}
    run = jobs.create_run(db, stage, values, runs_dir=tmp_path / "runs", start=False)
    preview = run_preview.preview_run(db, "default", stage, values, estimate_time=False)
    read = _rows_the_runner_reads(db_path, run, tmp_path)
    assert preview.rows == len(read) and preview.unit == training_stages.get(stage).unit
    previewed, _ = run_preview._rows(db, "default", stage, train_configs.load_job_config(run.config))
    if training_stages.get(stage).samples:  # the prompts, shuffled by the runner
        assert sorted(read) == sorted(key for key, _ in previewed)
    else:  # the same rows, whatever the runner's order (KTO shuffles) and format (conversation or text)
        assert sorted(map(_identity, read)) == sorted(_identity(row) for _, row in previewed)
    # export_fixtures' labels in `default` by alice and bob: ratings of response 1 (6, 7), 2 (2, 4), 3 (4) against
    # the midpoint 4: 1 and 3 well rated (sft), all 3 rated (kto); their rankings of prompt 1 give 1>2 and 1>3
    # (both), 3>2 (alice; bob tied them); carol's ranking and the imported one are left out. Prompts: 2 in 'train'.
    expected = {"sft": 2, "rm": 3, "dpo": 3, "kto": 3, "ppo": 2, "grpo": 2, "rloo": 2, "online-dpo": 2}
    assert len(read) == expected[stage]


def test_a_ppo_run_stores_the_app_defaults_it_runs_with(db, tmp_path):
    from labeler.services.training.runners.ppo import ppo_config
    from labeler.services.settings.training_stages.ppo import (PEOPLE_RANKING_LEARNING_RATE, REWARD_MODEL_LEARNING_RATE,
                                                               kl_settings_for)

    function = {"reward": "function"}  # PPOConfig's learning rate: what it was tuned on
    plain = jobs.create_run(db, "ppo", function, runs_dir=tmp_path, start=False)
    asked = jobs.create_run(db, "ppo", {**function, "init_kl_coef": 0.1, "horizon": 1000}, runs_dir=tmp_path,
                            start=False)
    small = jobs.create_run(db, "ppo", {**function, "batch_size": 16, "mini_batch_size": 4}, runs_dir=tmp_path,
                            start=False)
    # 64: PPOConfig's batch (the horizon is one batch); 0.03: PPOConfig's init_kl_coef
    assert plain.config["trainer"] == {"horizon": 64, "kl_coef_min": 0.03}
    assert small.config["trainer"] == {"batch_size": 16, "mini_batch_size": 4, "horizon": 16, "kl_coef_min": 0.03}
    assert asked.config["trainer"] == {"init_kl_coef": 0.1, "horizon": 1000, "kl_coef_min": 0.1}  # the user's win
    # PPO's default reward is the reward model: a third of PPOConfig's learning rate unless one is set.
    by_reward_model = jobs.create_run(db, "ppo", {}, runs_dir=tmp_path, start=False)
    assert by_reward_model.config["trainer"] == {"horizon": 64, "kl_coef_min": 0.03,
                                                 "learning_rate": REWARD_MODEL_LEARNING_RATE}
    assert REWARD_MODEL_LEARNING_RATE == 2e-5
    for run in (plain, asked, small):
        stored = run.config["trainer"]
        assert kl_settings_for(stored) == {}  # nothing is added at run time
        ctx = StageContext(run.id, "unused.db", "ppo", "default", train_configs.load_job_config(run.config), stored,
                           tmp_path, sink=None)
        config = ppo_config(ctx)
        assert {name: getattr(config, name) for name in stored} == stored
    # A run ranked by people gets three quarters of the learning rate unless one is set (by the user or a recipe).
    ranked = jobs.create_run(db, "ppo", {"reward": "mix"}, runs_dir=tmp_path, start=False)
    assert ranked.config["trainer"]["learning_rate"] == PEOPLE_RANKING_LEARNING_RATE == 4.5e-5
    rated = jobs.create_run(db, "ppo", {"reward": "mix", "human_label": "rating"}, runs_dir=tmp_path, start=False)
    chosen = jobs.create_run(db, "ppo", {"reward": "human", "learning_rate": 1e-5}, runs_dir=tmp_path, start=False)
    assert "learning_rate" not in rated.config["trainer"]  # PPOConfig's 6e-5: ratings keep their scale
    assert chosen.config["trainer"]["learning_rate"] == 1e-5
    assert "reward_model" not in ranked.config["job"]  # no reward model yet: the online model starts from the encoder
    # The runner adds nothing to what is stored (run_settings resolves a run once): a config stored without the
    # app's KL settings runs with PPOConfig's own.
    older = StageContext(1, "unused.db", "ppo", "default", train_configs.load_job_config({}), {}, tmp_path,
                         sink=None)
    assert (ppo_config(older).horizon, ppo_config(older).kl_coef_min) == (512, 0.0)


def test_a_mix_run_stores_the_reward_model_it_starts_from_and_takes_the_reward_models_rate(db, tmp_path,
                                                                                         tiny_encoder_dir):
    from labeler.services.serving import models
    from labeler.services.settings.training_stages.ppo import PEOPLE_RANKING_LEARNING_RATE, REWARD_MODEL_LEARNING_RATE

    models.register_model(db, "rm-a", str(tiny_encoder_dir), "reward")
    models.register_model(db, "rm-b", str(tiny_encoder_dir), "reward")
    newest = jobs.create_run(db, "ppo", {"reward": "mix"}, runs_dir=tmp_path, start=False)
    named = jobs.create_run(db, "ppo", {"reward": "mix", "reward_model": "rm-a"}, runs_dir=tmp_path, start=False)
    assert (newest.config["job"]["reward_model"], named.config["job"]["reward_model"]) == ("rm-b", "rm-a")
    assert newest.config["trainer"]["learning_rate"] == named.config["trainer"]["learning_rate"] == 2e-5
    assert REWARD_MODEL_LEARNING_RATE == 2e-5 != PEOPLE_RANKING_LEARNING_RATE
    # people alone (no reward model) keep the people's rate, a rate set by the user stays, and other rewards
    # store no warm start
    human = jobs.create_run(db, "ppo", {"reward": "human"}, runs_dir=tmp_path, start=False)
    asked = jobs.create_run(db, "ppo", {"reward": "mix", "learning_rate": 4e-5}, runs_dir=tmp_path, start=False)
    by_function = jobs.create_run(db, "ppo", {"reward": "vader"}, runs_dir=tmp_path, start=False)
    assert human.config["trainer"]["learning_rate"] == PEOPLE_RANKING_LEARNING_RATE
    assert "reward_model" not in human.config["job"] and "reward_model" not in by_function.config["job"]
    assert asked.config["trainer"]["learning_rate"] == 4e-5 and asked.config["job"]["reward_model"] == "rm-b"
    # the preview shows what launching stores
    preview = run_preview.preview_run(db, "default", "ppo", {"reward": "mix"}, estimate_time=False)
    assert preview.app_settings["learning_rate"] == 2e-5


@pytest.mark.parametrize("stage", STAGE_NAMES)
def test_every_stored_config_is_complete_resolving_it_again_changes_nothing(db, tmp_path, stage):
    run = jobs.create_run(db, stage, {"learning_rate": 2e-5}, runs_dir=tmp_path, start=False)
    # Resolving the stored config again changes nothing: what is stored is complete, app defaults included.
    again = run_settings.resolve_run(db, "default", stage, {**run.config["job"], **run.config["trainer"]}).config
    assert again == run.config
    app_defaults = training_stages.get(stage).app_defaults
    job = train_configs.load_job_config(run.config)
    assert app_defaults(run.config["trainer"], job) == {}
    assert set(app_defaults({}, job)) <= set(run.config["trainer"])
