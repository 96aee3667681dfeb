"""A run's settings resolved once (run_settings.resolve_run): the preview, the stored config and the trainer config
agree on every field for every stage; each value says where it came from; a typed value is kept even when it
equals a default; and what cannot run is refused before anything heavy is imported."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from export_fixtures import build_labelled_db

from labeler import forms
from labeler.services.training import jobs, run_preview, run_settings, train_configs
from labeler.services.serving import models
from labeler.services.data import projects
from labeler.services.settings import training_stages
from labeler.errors import InputError
from labeler.services.training.stages import StageContext

ROOT = Path(__file__).resolve().parents[2]
STAGES = training_stages.NAMES


@pytest.fixture
def labelled(db):
    build_labelled_db(db)
    return db


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty local Hub cache and no Hub: a hub id is known only when it is in the cache."""
    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def runner_config(stage: str, run, output_dir: Path):
    """The trainer config the stage's runner builds from the stored run (runners.common / runners.ppo)."""
    ctx = StageContext(run.id, "unused.db", stage, "default", train_configs.load_job_config(run.config),
                       dict(run.config["trainer"]), output_dir, sink=None)
    if stage == "ppo":
        from labeler.services.training.runners.ppo import ppo_config

        return ppo_config(ctx)
    from labeler.services.training.runners.common import trainer_args

    return trainer_args(ctx, stage)


@pytest.mark.parametrize("stage", STAGES)
def test_the_preview_the_stored_config_and_the_trainer_config_agree_on_every_field(labelled, tmp_path, stage):
    typed = {"learning_rate": 3e-5, "seed": 7}
    run = jobs.create_run(labelled, stage, typed, runs_dir=tmp_path / "runs", start=False)
    resolved = run_settings.resolve_run(labelled, "default", stage, typed)  # what the preview resolves
    assert resolved.config == run.config
    trainer = runner_config(stage, run, tmp_path / "out")
    previewed = resolved.trainer_config(output_dir=str(tmp_path / "out" / "checkpoints"))
    assert forms.to_dict(previewed) == forms.to_dict(trainer)  # every field, the job's seed and steps included
    ran = forms.to_dict(trainer)
    assert {name: ran[name] for name in run.config["trainer"]} == run.config["trainer"]
    assert ran["seed"] == 7 and ran["learning_rate"] == 3e-5
    if "max_steps" in ran and not training_stages.get(stage).online_trl:
        assert ran["max_steps"] == train_configs.load_job_config(run.config).steps
    # the preview says the same run as a command, and that command stores the same config
    preview = run_preview.preview_run(labelled, "default", stage, typed, estimate_time=False)
    assert preview.command == resolved.command() and f"`{preview.command}`" in preview.markdown()


def test_the_online_stages_store_the_jobs_group_and_answer_length(labelled, tmp_path):
    # grpo/rloo take answers_per_prompt and max_new_tokens (the project's: 128 in a chat project) as their
    # trainer's group size and answer length: stored, so the runner adds nothing
    resolved = run_settings.resolve_run(labelled, "default", "grpo", {"answers_per_prompt": 2})
    assert resolved.config["trainer"]["num_generations"] == 2
    assert resolved.config["trainer"]["max_completion_length"] == projects.get_project(labelled, "default").answer_tokens
    assert (resolved.source("num_generations"), resolved.source("max_completion_length")) == ("typed", "project")
    with pytest.raises(InputError) as error:  # people rank each group: refused when resolved, not in the worker
        run_settings.resolve_run(labelled, "default", "grpo", {"reward": "human", "num_generations": 2})
    assert error.value.field == "num_generations"


def test_each_value_says_where_it_came_from(labelled):
    resolved = run_settings.resolve_run(labelled, "default", "ppo", {"reward": "mix", "batch_size": 16,
                                                                     "mini_batch_size": 4})
    project_tokens = projects.get_project(labelled, "default").answer_tokens
    assert resolved.value("max_new_tokens") == project_tokens and resolved.source("max_new_tokens") == "project"
    assert (resolved.value("learning_rate"), resolved.source("learning_rate")) == (4.5e-5, "app default")
    assert (resolved.value("horizon"), resolved.source("horizon")) == (16, "app default")
    assert resolved.source("batch_size") == "typed" and resolved.source("cliprange") == "class default"
    by_recipe = run_settings.resolve_run(labelled, "default", "ppo", {"recipe": "0.5b"})
    assert (by_recipe.value("max_new_tokens"), by_recipe.source("max_new_tokens")) == (64, "recipe")
    assert (by_recipe.value("learning_rate"), by_recipe.source("learning_rate")) == (3e-6, "recipe")
    dpo = run_settings.resolve_run(labelled, "default", "dpo", {})
    assert dpo.source("steps") == "app default"  # one pass over the pairs there are


def test_a_typed_value_equal_to_a_default_is_kept(labelled):
    # PPOConfig's own rate, typed: the app's rate for a reward model (2e-5) does not overrule it
    typed = run_settings.resolve_run(labelled, "default", "ppo", {"learning_rate": 6e-5})
    assert typed.config["trainer"]["learning_rate"] == 6e-5 and typed.source("learning_rate") == "typed"
    # the job's own answer length, typed in a project of 128-token answers: kept, stored, marked typed
    short = run_settings.resolve_run(labelled, "default", "ppo", {"max_new_tokens": 16})
    assert short.config["job"]["max_new_tokens"] == 16 and short.source("max_new_tokens") == "typed"
    # job settings typed at their class default are stored too (the old resolution dropped them)
    vader = run_settings.resolve_run(labelled, "default", "ppo", {"reward": "vader", "checkpoint_every": 10})
    assert vader.config["job"]["reward_function"] == "vader" and vader.config["job"]["checkpoint_every"] == 10


def test_a_hub_model_not_in_the_local_cache_is_refused_naming_how_to_fetch_it(labelled, offline_hub):
    with pytest.raises(InputError) as error:
        run_preview.preview_run(labelled, "default", "sft", {"model": "nobody/none"}, estimate_time=False)
    message = str(error.value)
    assert error.value.field == "model" and "'nobody/none'" in message
    assert "hf download nobody/none" in message and "huggingface-cli download nobody/none" in message
    # in the cache (as huggingface_hub lays it out): accepted
    snapshot = offline_hub / "models--nobody--none" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (offline_hub / "models--nobody--none" / "refs").mkdir()
    (offline_hub / "models--nobody--none" / "refs" / "main").write_text("abc123")
    run_settings.check_model(labelled, "nobody/none", "model")


def test_a_missing_folder_is_refused_by_the_dry_run_as_by_a_launch(labelled, tmp_path):
    for call in (lambda: run_preview.preview_run(labelled, "default", "sft", {"model": "/no/such"}),
                 lambda: jobs.create_run(labelled, "sft", {"model": "/no/such"}, runs_dir=tmp_path, start=False)):
        with pytest.raises(InputError) as error:
            call()
        assert error.value.field == "model" and "/no/such" in str(error.value)


def test_a_reward_naming_missing_code_or_a_missing_model_is_refused_with_the_names_there_are(labelled, tmp_path,
                                                                                          monkeypatch):
    with pytest.raises(InputError) as error:
        run_preview.preview_run(labelled, "default", "ppo", {"reward": "nosuchmodule:fn"}, estimate_time=False)
    assert error.value.field == "reward_function" and "no module 'nosuchmodule'" in str(error.value)
    (tmp_path / "resolved_run_rewards.py").write_text("def concise(queries, responses):\n    return []\n\n"
                                            "def polite(queries, responses):\n    return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InputError) as error:
        run_preview.preview_run(labelled, "default", "ppo", {"reward": "resolved_run_rewards:shorter"}, estimate_time=False)
    assert error.value.field == "reward_function"
    assert "has no 'shorter'; it defines: concise, polite" in str(error.value)
    run_settings.check_function("resolved_run_rewards:concise", "reward_function")  # there: accepted, not imported
    assert "resolved_run_rewards" not in sys.modules
    models.register_model(labelled, "rm-a", str(_weights(tmp_path)), "reward")
    with pytest.raises(InputError) as error:
        run_preview.preview_run(labelled, "default", "ppo", {"reward": "rm:rm-typo"}, estimate_time=False)
    assert error.value.field == "reward_model" and "Registered reward models: rm-a" in str(error.value)


def _weights(tmp_path: Path) -> Path:
    folder = tmp_path / "weights"
    folder.mkdir(exist_ok=True)
    (folder / "model.safetensors").write_bytes(b"")
    return folder


REFUSED = """
import sys
from labeler.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "heavy": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


@pytest.mark.parametrize("sets", [["learning_rate=-1"], ["model=nobody/none"], ["reward_model=nope"],
                                  ["learning_rate=-1", "--dry-run"], ["model=nobody/none", "--dry-run"]])
def test_a_refused_train_command_answers_before_torch_is_imported(tmp_path, sets):
    args = ["train", "sft", "--db", str(tmp_path / "studio.db"), "--create-db", "--runs-dir", str(tmp_path / "runs")]
    for item in sets:
        args += [item] if item.startswith("--") else ["--set", item]
    if "reward_model=nope" in sets:
        args[1] = "ppo"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty-cache")}
    done = subprocess.run([sys.executable, "-c", "import json\n" + REFUSED, *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 2, "heavy": []}, done.stderr
    assert done.stderr.count("\n") <= 2  # one line naming the field, no traceback
    assert f"field '{sets[0].split('=')[0]}'" in done.stderr


@pytest.mark.parametrize("stage, typed", [("ppo", {"reward": "mix", "batch_size": 16, "mini_batch_size": 4}),
                                          ("dpo", {"lora": True, "beta": 0.2}), ("grpo", {"recipe": "1.5b"})])
def test_the_command_the_preview_shows_queues_the_same_run(labelled, tmp_path, capsys, stage, typed):
    import shlex

    from labeler.cli import main

    resolved = run_settings.resolve_run(labelled, "default", stage, typed)
    words = shlex.split(resolved.command())
    assert words[:5] == ["rlhf-studio", "train", stage, "--project", "default"]
    sets = [words[i + 1] for i, word in enumerate(words) if word == "--set"]
    again = run_settings.resolve_run(labelled, "default", stage, forms.parse_sets(sets))
    assert again.config == resolved.config
    # and the dry run prints it
    db_file = labelled.execute("PRAGMA database_list").fetchone()[2]
    assert main(["train", "sft", "--db", db_file, "--dry-run", "--set", "steps=2"]) == 0
    assert ("The same run from the command line: rlhf-studio train sft --project default --set steps=2 "
            "--set max_new_tokens=128") in capsys.readouterr().out  # the chat project's answer length, pinned
