"""The model of a cancelled run's newest completed step: a cancel throws nothing trained away.

`runs cancel` (jobs.cancel_run) stops the run's processes, then calls `keep_newest_checkpoint`: the model of the
newest complete checkpoint (weights, config, tokenizer; not the optimizer) is exported into the run's folder as
`model-step<N>` (the weights hard-linked: no copy) and registered as `<the run's model name>-step<N>`, with the
run's base model, settings, metrics at that step and data snapshot, so it can be chatted with, evaluated
(`rlhf-studio eval --model ppo-run5-step34`, KL against the run's base) or trained on further.

A PPO run whose rewards come from people journals every step and writes its weights as its checkpoint_share
allows (stages.checkpoint_due), so the kept model is its newest weights checkpoint, and `runs resume` trains the
journalled steps after it again; other runs keep the newest of every `checkpoint_every` steps.

The models row of a kept model has no run_id, as a run registers at most one model, its final one (a resumed
run that finishes registers it as usual); its config names the run and the step under `kept_from`.
"""
from __future__ import annotations

import json
from pathlib import Path

import sqlite_utils

from labeler.services.execution import checkpoints, run_metrics, runs
from labeler.services.training import hub
from labeler.services.serving import models
from labeler.services.settings import training_stages
from labeler.errors import InputError
from labeler.services.training.stages import data_snapshot, model_name
from labeler.services.settings.job_settings import load_job_config

KEPT_FROM = "kept_from"
# The rows a stage froze in its folder at its first start (StageContext.frozen_rows) and the snapshot kind its
# final model is registered with (labeler/services/training/runners/): the kept model gets the same lineage.
FROZEN_ROWS = {name: stage.frozen_rows for name, stage in training_stages.STAGES.items() if stage.frozen_rows[0]}


def kept_models(db: sqlite_utils.Database, run_id: int) -> list[dict]:
    """The models kept from a run's checkpoints (cancels), oldest first."""
    return [m for m in models.list_models(db) if (m["config"].get(KEPT_FROM) or {}).get("run") == int(run_id)]


def _snapshot(stage: str, output_dir: Path) -> str:
    name, kind = FROZEN_ROWS.get(stage, ("", ""))
    path = output_dir / f"{name}.json"
    if not name or not path.is_file():
        return ""
    return data_snapshot(kind, json.loads(path.read_text(encoding="utf-8")))


def keep_newest_checkpoint(db: sqlite_utils.Database, run_id: int) -> dict | None:
    """Register the model of the run's newest complete checkpoint (see the module docstring); its models row,
    or None when the run has no complete checkpoint. Call it once the run's processes are gone (no checkpoint
    is being written). A checkpoint already kept is not kept twice: its row is returned."""
    run = runs.get_run(db, run_id)
    output_dir = Path(run.output_dir)
    checkpoint = checkpoints.latest_checkpoint(output_dir / "checkpoints")
    if checkpoint is None:
        return None
    step = checkpoints.checkpoint_step(checkpoint)
    for kept in kept_models(db, run_id):
        if kept["config"][KEPT_FROM]["step"] == step:
            return kept
    folder = checkpoints.export_model(checkpoint, output_dir / f"model-step{step}")
    job = load_job_config(run.config)
    kind = "adapter" if (folder / "adapter_config.json").exists() else "reward" if run.stage == "rm" else "policy"
    name = f"{model_name(run.stage, run.id, job.output_name)}-step{step}"
    if models.model_exists(db, name):
        name = f"{name}-run{run.id}"  # an output name reused by another run
    config = {"stage": run.stage, **run.config, KEPT_FROM: {"run": run.id, "step": step, "status": run.status}}
    kept = models.register_model(db, name, str(folder), kind, base_model=job.base_model(run.stage), config=config,
                                 metrics=run_metrics.metrics_at(db, run.id, step), data_snapshot=_snapshot(run.stage, output_dir))
    hub.write_registered_model_card(db, name)
    return kept


def keep_after_cancel(db: sqlite_utils.Database, run_id: int) -> dict | None:
    """jobs.cancel_run's step once the run's processes are gone: keep_newest_checkpoint for a run that is now
    cancelled (one that finished meanwhile registered its own model). The cancel stands whatever happens
    here: a checkpoint that cannot be exported (disk full, a folder removed) is said on the run's row."""
    if runs.get_run(db, run_id).status != "cancelled":
        return None
    try:
        return keep_newest_checkpoint(db, run_id)
    except (OSError, InputError) as error:
        runs.append_error(db, run_id, f"; its newest checkpoint was not kept as a model: {error}")
        return None
