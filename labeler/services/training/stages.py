"""What the worker runs for each stage: data from the database, the rlhf trainer, checkpoints, the result.

The rows each stage trains on are read here (the functions the stages name as `training_rows` in training_stages/,
which the runners and the preview call through Stage.rows), apart from the stage registry on purpose: the registry
is facts on the settings' ground floor, and reading rows needs the export, project and prompt code above it.

A stage runner is a function `run(ctx: StageContext) -> RunResult`. The built-in ones (sft, rm, dpo, ppo) live
in labeler/services/training/runners/; a run whose JobConfig names a `runner` (module:function) uses that
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

from labeler.services.execution import checkpoints
from labeler.services.labels.export import preference_rows, split_by_prompt, training_options, unpaired_rows
from labeler.services.execution.metrics_sink import MetricsSink
from labeler.services.settings.job_settings import JobConfig
from labeler.services.data.projects import get_project
from labeler.services.data.prompts import split_texts
from labeler.services.labels.question_rows import criterion_preferences
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


# ---- the rows each stage trains on (its `training_rows`) -------------------------------------------------
def training_prompts(db, project: str, job) -> list[str]:
    """The project's training prompts (split 'train': held-out prompts are never trained on), in the database's
    order; a runner shuffles them by the job's seed (ppo, grpo, rloo)."""
    return split_texts(db, get_project(db, project).id, "train")


def sft_rows(db, project: str, job, **options) -> list[dict]:
    """Well-rated answers (mean score >= sft_min_score, default the scale's midpoint) as prompt + completion."""
    listed = unpaired_rows(db, project, training_options(job, threshold=job.sft_min_score, **options))
    return [{"prompt": r["prompt"], "completion": r["completion"]} for r in listed if r["label"]]


def rm_rows(db, project: str, job, **options) -> list[dict]:
    """Preference pairs: rankings (and, with include_rating_pairs, ratings of two answers to a prompt); with a
    `criterion`, pairs of answers people scored differently on that criterion (one reward model per criterion,
    as Llama 2 trained helpfulness and safety apart)."""
    if job.criterion:
        return criterion_preferences(db, project, job.criterion)
    return preference_rows(db, project, training_options(job, **options))


def dpo_rows(db, project: str, job, **options) -> list[dict]:
    """The reward model's preference pairs (without a criterion), as conversations for a chat model
    (`conversational`)."""
    return preference_rows(db, project, training_options(job, **options))


def kto_rows(db, project: str, job, **options) -> list[dict[str, Any]]:
    """Every rated answer: desirable when its mean score is at least sft_min_score (default the scale's midpoint),
    undesirable below it (export --kind unpaired's rows), in the export's order (the runner shuffles them)."""
    listed = unpaired_rows(db, project, training_options(job, threshold=job.sft_min_score, **options))
    return [{"prompt": r["prompt"], "completion": r["completion"], "label": bool(r["label"])} for r in listed]


def online_dpo_rows(db, project: str, job, **options) -> list[dict]:
    """The project's training prompts (held-out prompts are never trained on) as prompt-only rows, in the
    database's order; the runner shuffles them by the job's seed."""
    return [{"prompt": text} for text in training_prompts(db, project, job)]


def split_for_training(records: list[tuple[str, dict]], test_size: float, seed: int) -> tuple[list, list]:
    """(train, eval) rows as the stage runners split them (runners.common.split_rows): by prompt (export's
    split_by_prompt), and everything trained on when either side would have fewer than 2 rows."""
    train, test = split_by_prompt(records, test_size, seed)
    if len(train) < 2 or len(test) < 2:
        return [row for _, row in records], []
    return train, test
