"""What the worker runs for each stage: data from the database, the rlhf trainer, checkpoints, the result.

A stage runner is a function `run(ctx: StageContext) -> RunResult`. The built-in ones (sft, rm, dpo, ppo) live
in labeler/services/runners/; a run whose JobConfig names a `runner` (module:function) uses that
instead, which is how tests inject a tiny job and how a user plugs in a custom one.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from labeler.services import checkpoints
from labeler.services.metrics_sink import MetricsSink
from labeler.services.job_settings import JobConfig
from storage import open_db


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

    @property
    def is_main_process(self) -> bool:
        """False in the training processes other than the main one (their sink writes nothing)."""
        return self.sink.writes

    def should_stop(self) -> bool:
        return self.sink.stop_requested()

    def resume_checkpoint(self) -> Path | None:
        """The newest complete checkpoint (incomplete ones, left by a crash, are deleted first, by the main
        process alone: every rank then finds the same complete one, as none is being written at start)."""
        if self.is_main_process:
            checkpoints.remove_incomplete(self.checkpoint_root)
        return checkpoints.latest_checkpoint(self.checkpoint_root)

    def save_checkpoint(self, step: int, write: Callable[[Path], None], meta: dict | None = None) -> Path | None:
        """An atomic checkpoint written by `write(folder)`. Call it on every rank (`write` may reach collectives,
        such as PPOTrainer.save_checkpoint's gather of RNG states): the main process's folder becomes the
        checkpoint, the other ranks write into a throwaway one (None is returned there). The newest
        `checkpoint_keep(job)` complete checkpoints are kept. A cancel (SIGTERM) that arrives while the main
        process writes takes effect once the checkpoint is complete, so the step just trained is kept."""
        if self.is_main_process:
            with checkpoints.signal_deferred():
                return checkpoints.save_checkpoint(self.checkpoint_root, step, write, meta,
                                                   keep=checkpoint_keep(self.job))
        with tempfile.TemporaryDirectory(prefix="rank-scratch-") as scratch:
            write(Path(scratch))
        return None

    def frozen_rows(self, name: str, rows: list) -> list:
        """The training rows (or prompts) this run started with. The first start stores them in the run folder
        (main process, atomically); a resumed run trains on those, never on a data set that changed under it
        (labels added, removed or filtered differently since), and says so when the database now differs."""
        path = self.output_dir / f"{name}.json"
        if path.exists():
            saved = json.loads(path.read_text(encoding="utf-8"))
            if saved != rows:
                print(f"resuming on the {len(saved)} {name} this run started with; the database now gives {len(rows)} "
                      f"(labels changed since): start a new run to train on them", flush=True)
            return saved
        if self.is_main_process:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".json.partial")
            partial.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
            os.replace(partial, path)
        return rows

    def open_db(self):
        return open_db(self.db_path)


HUMAN_REWARDS = ("human", "mix")  # PPO reward sources that wait for people's labels


def model_name(stage: str, run_id: int, output_name: str = "") -> str:
    """The registry name of the model a run trains: its output_name, else <stage>-run<id> (worker.register_result
    adds -run<id> only when another run took the name)."""
    return output_name or f"{stage}-run{run_id}"


def checkpoint_due(job: JobConfig, step: int, pacer: checkpoints.WeightsPacer | None = None) -> bool:
    """Whether a PPO run saves a checkpoint (weights and optimizer state) after completing `step`: when its rewards
    come from people (reward human or mix), as its `pacer` allows (checkpoints.WeightsPacer: at most
    checkpoint_share of the run's time; every step without one), their labels being journalled every step
    (step_journal) so the steps after the newest checkpoint are trained again on resume; else every
    `checkpoint_every` steps (0: none, only the final model)."""
    if step < 1:
        return False
    if job.reward in HUMAN_REWARDS:
        return pacer is None or pacer.due()
    return bool(job.checkpoint_every) and step % job.checkpoint_every == 0


def checkpoint_keep(job: JobConfig) -> int:
    """How many complete checkpoints a run keeps: 1 for people's labels (the newest is complete before the one before
    it is deleted, and the journal holds every step since), else 2."""
    return 1 if job.reward in HUMAN_REWARDS else 2


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
