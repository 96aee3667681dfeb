"""What the worker runs for each stage: data from the database, the rlhf trainer, checkpoints, the result.

A stage runner is a function `run(ctx: StageContext) -> RunResult`. The built-in ones (sft, rm, dpo, ppo) live
in labeler/services/stage_runners.py; a run whose JobConfig names a `runner` (module:function) uses that
instead, which is how tests inject a tiny job and how a user plugs in a custom one.
"""
from __future__ import annotations

import hashlib
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from labeler.services import checkpoints
from labeler.services.metrics_sink import MetricsSink
from labeler.services.train_configs import JobConfig


@dataclass
class StageContext:
    run_id: int
    db_path: str
    stage: str
    project: str
    job: JobConfig
    trainer_settings: dict[str, Any]
    output_dir: Path
    sink: MetricsSink

    @property
    def checkpoint_root(self) -> Path:
        return self.output_dir / "checkpoints"

    @property
    def final_dir(self) -> Path:
        return self.output_dir / "model"

    def should_stop(self) -> bool:
        return self.sink.stop_requested()

    def resume_checkpoint(self) -> Path | None:
        """The newest complete checkpoint (incomplete ones, left by a crash, are deleted first)."""
        checkpoints.remove_incomplete(self.checkpoint_root)
        return checkpoints.latest_checkpoint(self.checkpoint_root)

    def save_checkpoint(self, step: int, write: Callable[[Path], None], meta: dict | None = None) -> Path:
        return checkpoints.save_checkpoint(self.checkpoint_root, step, write, meta)

    def open_db(self):
        from storage import open_db

        return open_db(self.db_path)


@dataclass(frozen=True)
class RunResult:
    path: str  # the saved model folder
    kind: str  # registry kind: policy, reward or adapter
    base_model: str
    metrics: dict[str, float] = field(default_factory=dict)
    data_snapshot: str = ""


def data_snapshot(kind: str, row_ids: list) -> str:
    """Lineage of the training data: a hash of the exported rows' identities (sorted), so two runs on the same
    labels get the same snapshot and any label added or removed changes it."""
    canonical = json.dumps(sorted(json.dumps(r, sort_keys=True, default=str) for r in row_ids))
    return f"{kind}:{len(row_ids)}:{hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:16]}"


def runner_for(ctx: StageContext) -> Callable[[StageContext], RunResult]:
    if ctx.job.runner:
        module_name, _, function = ctx.job.runner.partition(":")
        return getattr(importlib.import_module(module_name), function)
    from labeler.services import stage_runners

    return stage_runners.RUNNERS[ctx.stage]


def run_stage(ctx: StageContext) -> RunResult:
    ctx.output_dir.mkdir(parents=True, exist_ok=True)
    return runner_for(ctx)(ctx)


def register_result(db, ctx: StageContext, result: RunResult) -> dict:
    """Register the trained model with its lineage: base model, run, config, final metrics, data snapshot."""
    from labeler.services import models

    row = db.execute("SELECT config_json FROM runs WHERE id = ?", [ctx.run_id]).fetchone()
    name = ctx.job.output_name or f"{ctx.stage}-run{ctx.run_id}"
    if db.execute("SELECT 1 FROM models WHERE name = ?", [name]).fetchone():
        name = f"{name}-run{ctx.run_id}"  # a reused output name must not fail a finished training
    metrics = {**ctx.sink.final_metrics(), **result.metrics}
    return models.register_model(
        db, name, result.path, result.kind, base_model=result.base_model, run_id=ctx.run_id,
        config={"stage": ctx.stage, **json.loads(row[0])}, metrics=metrics, data_snapshot=result.data_snapshot,
    )
