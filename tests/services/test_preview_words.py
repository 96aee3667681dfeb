"""The run preview lists the settings the app, the project or a recipe gave a run in the Train form's words
(issue 49 item 7: no raw field names on a screen); the command line it shows keeps `--set name=value`, which is
what a person types there."""
from __future__ import annotations

import re

import pytest
from export_fixtures import build_labelled_db

from labeler.field_words import TRAIN_LABELS
from labeler.services.training import run_settings
from labeler.services.training.run_preview import preview_run

SETTINGS_LINE = "Settings this run takes from the app, the project or the recipe (set them to change them): "
PPO_SHAPE = {"batch_size": 8, "mini_batch_size": 4, "answers_per_prompt": 4, "reward": "mix"}


@pytest.fixture
def labelled(db):
    build_labelled_db(db)
    return db


def settings_line(markdown: str) -> str:
    [line] = [line for line in markdown.splitlines() if line.startswith(SETTINGS_LINE)]
    return line.removeprefix(SETTINGS_LINE).strip()


@pytest.mark.parametrize("stage, values, expected", [
    # PPO ranked by people: the app's KL controller (horizon = the batch of 8, floor at the start 0.03) and its
    # learning rate for people's rankings, the project's answer length (export_fixtures: 128 tokens).
    ("ppo", PPO_SHAPE, "KL horizon (rollouts): 8 (app default); Lowest KL weight: 0.03 (app default); "
                       "Learning rate: 4.5e-05 (app default); Answer length (new tokens): 128 (project)."),
    # DPO full fine-tuning: the app's learning rate; the longest example fitted to the answers (256 + 128 + 8);
    # steps for one pass over 4 pairs at batch 4 = 1.
    ("dpo", {}, "Learning rate: 3e-05 (app default); Longest example (tokens): 392 (app default); "
                "Answer length (new tokens): 128 (project); "
                "How long (training steps): 1 (app default)."),
])
def test_the_settings_line_reads_in_the_forms_words_and_names_each_source(labelled, stage, values, expected):
    preview = preview_run(labelled, "default", stage, values, estimate_time=False)
    line = settings_line(preview.markdown())
    assert line == expected
    assert not re.search(r"\b[a-z_]+=", line)  # no name=value
    # the command keeps the CLI's names: it is what a person types there
    assert "--set learning_rate=" in preview.command and "--set max_new_tokens=128" in preview.command


def test_a_recipe_and_a_setting_taken_from_the_job_are_named_once_in_words(labelled):
    # GRPO's answer length is the job's (max_completion_length from max_new_tokens): one entry, not two alike.
    grpo = settings_line(preview_run(labelled, "default", "grpo", {}, estimate_time=False).markdown())
    assert grpo == "Answer length (new tokens): 128 (project)."
    by_recipe = settings_line(preview_run(labelled, "default", "ppo", {**PPO_SHAPE, "recipe": "0.5b"},
                                          estimate_time=False).markdown())
    assert "(recipe)" in by_recipe and not re.search(r"\b[a-z_]+=", by_recipe)
    assert "Learning rate: " in by_recipe


def test_values_read_as_the_form_shows_them():
    assert [run_settings.value_words(v) for v in (True, False, None, 2e-5, 8, "ipo")] == \
        ["on", "off", "automatic", "2e-05", "8", "ipo"]


def test_every_setting_the_app_a_project_or_a_recipe_gives_has_form_words():
    from labeler.services.training import train_configs
    from labeler.services.settings import training_stages

    given = {"horizon", "kl_coef_min", "steps", "reward_model", "max_new_tokens"}
    for stage in train_configs.STAGES:
        given |= set(training_stages.get(stage).from_job)
        for recipe in train_configs.RECIPES:
            given |= set(train_configs.recipe_settings(stage, recipe))
    assert sorted(name for name in given if name not in TRAIN_LABELS) == []
