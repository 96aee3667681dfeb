"""Stage facts on the ground floor (issue 50 item 2): a stage is one module of facts; the settings, the storage check
of a run's stage, the preview and the estimate read the registry instead of naming stages, so a stage added as one
module (with its trainer config and runner) is offered, previewed, stored and dispatched like the app's own."""
from __future__ import annotations

import json
import pickle
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from labeler.services.training import jobs, run_estimate, train_configs
from labeler.services.execution import runs
from labeler.services.settings import training_stages
from labeler.errors import InputError
from labeler.services.settings.job_settings import JobConfig

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter: the echo stage (tests/services/echo_stage.py) registered before anything that reads the
# registry is imported, as the package's own modules are when it is imported.
ADD_A_STAGE = """
import argparse, json, sys, tempfile
from pathlib import Path

sys.path.insert(0, "tests/services")
from labeler.services.settings import training_stages
import echo_stage

training_stages.register(echo_stage.STAGE)

import gradio as gr
from export_fixtures import build_labelled_db

from labeler.cli import build_parser
from labeler.services.settings import job_settings
from labeler.services.training import jobs, run_preview, train_configs
from labeler.services.execution import runs
from labeler.services.training.runners import RUNNERS
from labeler.services.training.stages import StageContext
from labeler.ui.tabs.train import form
from storage import open_db

train = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
with gr.Blocks():
    launch = form.build_form()
tmp = Path(tempfile.mkdtemp())
db = open_db(str(tmp / "studio.db"))
build_labelled_db(db)
preview = run_preview.preview_run(db, "default", "echo", {"echoes": 3}, estimate_time=False)
run = jobs.create_run(db, "echo", {"echoes": 3}, runs_dir=tmp / "runs", start=False)
stored = runs.get_run(db, run.id)
ctx = StageContext(run.id, str(tmp / "studio.db"), "echo", "default", train_configs.load_job_config(stored.config),
                   stored.config["trainer"], tmp / "out", sink=None)
print(json.dumps({
    "cli": list(next(a for a in train._actions if a.dest == "stage").choices),
    "form": launch.stage.choices,
    "form_fields": [spec.name for spec in launch.specs_by_stage["echo"]],
    "all_stages": job_settings.ALL_STAGES,
    "preview": [preview.stage, preview.unit, preview.rows, preview.rows_per_step],
    "stored": [stored.stage, stored.config["trainer"]],
    "result": RUNNERS["echo"](ctx).kind,
}))
"""


def test_a_stage_added_as_one_module_is_offered_previewed_stored_and_run():
    done = subprocess.run([sys.executable, "-c", ADD_A_STAGE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    app_stages = ["sft", "rm", "dpo", "ppo", "grpo", "rloo", "kto", "online-dpo"]
    assert found["cli"] == found["all_stages"] == [*app_stages, "echo"]  # after the app's own (its order: 9)
    assert found["form"][-1] == ["Echo good answers (a test stage)", "echo"]
    assert found["form_fields"] == ["learning_rate", "echoes"]
    # export_fixtures' well-rated answers (sft's rows, which it names): 3 of them; 4 a step (its batch)
    assert found["preview"] == ["echo", "answers", 3, 4]
    assert found["stored"] == ["echo", {"echoes": 3}]
    assert found["result"] == "policy"


def test_an_unknown_stage_is_refused_before_anything_is_written(db, tmp_path):
    # The registry, not the schema, says which stages exist (the CHECK constraint is gone): the writer checks it.
    with pytest.raises(InputError) as error:
        runs.insert_run(db, "ppo2", {}, "default", None, "", tmp_path)
    assert error.value.field == "stage" and "sft, rm, dpo, ppo, grpo, rloo, kto, online-dpo" in error.value.message
    with pytest.raises(InputError):
        jobs.create_run(db, "ppo2", {}, runs_dir=tmp_path, start=False)
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_a_database_with_the_stage_check_keeps_its_runs_and_takes_any_registered_stage(db_path, monkeypatch):
    import storage.db
    from storage import open_db
    from storage.db import migrate
    from storage.migrations import MIGRATIONS

    index = [name for name, _ in MIGRATIONS].index("runs: stage checked against the stage registry")
    monkeypatch.setattr(storage.db, "MIGRATIONS", MIGRATIONS[:index])
    db = open_db(db_path)
    with db.conn:
        db.execute("INSERT INTO runs (project_id, stage, config_json) VALUES (1, 'online-dpo', '{}')")
        db.execute("INSERT INTO metrics (run_id, step, name, value) VALUES (1, 1, 'loss', 0.5)")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):  # the old schema's list
        db.execute("INSERT INTO runs (project_id, stage) VALUES (1, 'echo')")

    monkeypatch.setattr(storage.db, "MIGRATIONS", MIGRATIONS)
    migrate(db)
    assert [tuple(row) for row in db.execute("SELECT id, stage FROM runs")] == [(1, "online-dpo")]
    assert [tuple(row) for row in db.execute("SELECT run_id, step, name, value FROM metrics")] == [(1, 1, "loss", 0.5)]
    schema = db.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    assert "stage TEXT NOT NULL," in schema and "CHECK (stage" not in schema
    with db.conn:
        db.execute("INSERT INTO runs (project_id, stage) VALUES (1, 'echo')")  # a stage the registry may add
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.conn.close()
    # a fresh database ends the same
    fresh = open_db(str(Path(db_path).with_name("fresh.db")))
    assert fresh.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0] == schema
    fresh.conn.close()


def _label_trainer(**values):
    defaults = dict(per_device_train_batch_size=8, max_length=512, gradient_checkpointing=False)
    return SimpleNamespace(**{**defaults, **values})


@pytest.mark.parametrize("stage, rows, logit_tokens, reference", [
    ("sft", 8, 512, False),  # one sequence a row; logits over all of it
    ("rm", 16, 0, False),  # pairs; a scalar head: no logits
    ("dpo", 16, 448, True),  # pairs; logits over the answers (512 - 64 prompt tokens); a frozen reference copy
    ("kto", 16, 448, True),  # a row and its KL row
    ("online-dpo", 16, 448, True),  # two answers a prompt; its reference scores both
])
def test_the_memory_shape_of_a_label_stage_comes_from_its_facts(stage, rows, logit_tokens, reference):
    job = JobConfig(bf16=False)
    shape = run_estimate.train_shape(stage, job, _label_trainer(), "cpu")
    assert (shape.rows, shape.tokens, shape.logit_tokens, shape.reference) == (rows, 512, logit_tokens, reference)
    # LoRA turns the adapter off for the reference, and precomputed log-probs need none in memory
    assert not run_estimate.train_shape(stage, JobConfig(bf16=False, lora=True), _label_trainer(), "cpu").reference
    precomputed = _label_trainer(precompute_ref_log_probs=True)
    assert not run_estimate.train_shape(stage, job, precomputed, "cpu").reference


def test_the_app_s_trainer_configs_are_declared_with_their_stages_and_pickle():
    from labeler.services.training.runners import online, online_dpo
    from labeler.services.settings.training_stages import grpo, kto, online_dpo as online_dpo_stage, rloo

    pairs = [(grpo.StudioGRPOConfig, "grpo", online.StudioGRPOConfig),
             (rloo.StudioRLOOConfig, "rloo", online.StudioRLOOConfig),
             (kto.StudioKTOConfig, "kto", online.StudioKTOConfig),
             (online_dpo_stage.StudioOnlineDPOConfig, "online-dpo", online_dpo.StudioOnlineDPOConfig)]
    for cls, stage, runner_name in pairs:
        assert cls is train_configs.stage_config_class(stage) is runner_name  # one class, built once
        assert cls.__module__ == f"labeler.services.settings.training_stages.{stage.replace('-', '_')}"
        # transformers' Trainer pickles its arguments into every checkpoint (training_args.bin)
        config = cls(output_dir="unused", report_to="none")
        again = pickle.loads(pickle.dumps(config))
        assert type(again) is cls and again.learning_rate == config.learning_rate
    assert [cls(output_dir="unused", report_to="none").learning_rate for cls, _, _ in pairs] == [3e-5, 3e-5, 5e-5, 5e-5]
    with pytest.raises(AttributeError, match="NoSuchConfig"):
        grpo.NoSuchConfig  # noqa: B018


def test_registering_a_stage_twice_is_refused():
    with pytest.raises(ValueError, match="'ppo' is registered twice"):
        training_stages.register(training_stages.get("ppo"))
    assert list(training_stages.STAGES) == ["sft", "rm", "dpo", "ppo", "grpo", "rloo", "kto", "online-dpo"]
