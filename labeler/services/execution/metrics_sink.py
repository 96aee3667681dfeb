"""The training process's link to SQLite: each step's stats into `metrics`, PPO generations into `run_samples`,
progress and heartbeat on the run's row, and the early-stop flag read back.

The rlhf library never imports storage; it reports through callbacks. `ppo_callback` has the signature of
PPOTrainer.log_stats' `callback(step, stats, samples)`; `trainer_callback()` is a transformers TrainerCallback
for the Trainer-based stages (SFT, reward model, DPO). The sink owns its own connection (the worker's thread).
"""
from __future__ import annotations

import math
import numbers
import time
from typing import Any

from labeler.services.execution import runs
from storage import open_db, write_transaction


def scalar_stats(stats: dict[str, Any]) -> dict[str, float]:
    """Finite scalar values of a stats dict (tensors of one element and numpy scalars included)."""
    out = {}
    for name, value in stats.items():
        if hasattr(value, "numel") and callable(value.numel):
            if value.numel() != 1:
                continue
            value = value.item()
        elif hasattr(value, "item") and getattr(value, "size", 2) == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        value = float(value)
        if math.isfinite(value):
            out[str(name)] = value
    return out


def main_process_decides(flag: bool) -> bool:
    """Rank 0's flag on every rank (a broadcast, when torch.distributed runs): ranks that read the database at
    different moments would otherwise stop after different steps and wait for each other forever. Call it
    at the same point on every rank (a Trainer's on_step_end)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    box = [flag]
    dist.broadcast_object_list(box, src=0)
    return bool(box[0])


class MetricsSink:
    """`writes=False` is the sink of a training process other than the main one: it reads (the stop flag,
    final metrics) but every write is skipped, so N processes write each step once."""

    def __init__(self, db_path: str, run_id: int, stop_poll_seconds: float = 2.0, writes: bool = True):
        self.db = open_db(db_path)
        self.run_id = run_id
        self.writes = writes
        self.stop_poll_seconds = stop_poll_seconds
        self._stop_checked_at = 0.0
        self._stop = False

    def log(self, step: int, stats: dict[str, Any]) -> int:
        """Store one step's finite scalars; a repeated (step, name) replaces the old value (resume redoes steps)."""
        values = scalar_stats(stats)
        if not values or not self.writes:
            return 0
        with write_transaction(self.db):
            self.db.conn.executemany(
                "INSERT OR REPLACE INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)",
                [(self.run_id, int(step), name, value) for name, value in values.items()],
            )
        return len(values)

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """PPO generations (query, response, reward) of one step."""
        if not rows or not self.writes:
            return
        with write_transaction(self.db):
            self.db.conn.execute("DELETE FROM run_samples WHERE run_id = ? AND step = ?", [self.run_id, int(step)])
            self.db.conn.executemany(
                "INSERT INTO run_samples (run_id, step, query, response, reward) VALUES (?, ?, ?, ?, ?)",
                [(self.run_id, int(step), str(r.get("query", "")), str(r.get("response", "")),
                  None if r.get("reward") is None else float(r["reward"])) for r in rows],
            )

    def progress(self, step: int, total_steps: int | None = None) -> None:
        if not self.writes:
            return
        runs.record_progress(self.db, self.run_id, step, total_steps)

    def heartbeat(self) -> None:
        if not self.writes:
            return
        runs.record_progress(self.db, self.run_id)

    def truncate_after(self, step: int) -> None:
        """Forget metrics and samples logged after `step` (a resume from that checkpoint redoes them)."""
        if not self.writes:
            return
        with write_transaction(self.db):
            self.db.conn.execute("DELETE FROM metrics WHERE run_id = ? AND step > ?", [self.run_id, int(step)])
            self.db.conn.execute("DELETE FROM run_samples WHERE run_id = ? AND step > ?", [self.run_id, int(step)])

    def stop_requested(self) -> bool:
        """The early-stop flag, read at most every `stop_poll_seconds` (it is checked after every step)."""
        now = time.monotonic()
        if not self._stop and now - self._stop_checked_at >= self.stop_poll_seconds:
            self._stop = runs.stop_requested(self.db, self.run_id)
            self._stop_checked_at = now
        return self._stop

    def final_metrics(self) -> dict[str, float]:
        """The last logged value of every metric of the run (registered with the model)."""
        rows = self.db.execute(
            "SELECT m.name, m.value FROM metrics m JOIN (SELECT name, MAX(step) AS step FROM metrics"
            " WHERE run_id = ? GROUP BY name) last ON last.name = m.name AND last.step = m.step WHERE m.run_id = ?",
            [self.run_id, self.run_id],
        ).fetchall()
        return {row[0]: row[1] for row in rows}

    # ---- adapters ----------------------------------------------------------------------------------
    def ppo_callback(self, step: int, stats: dict[str, Any], samples: list[dict[str, Any]] | None = None) -> None:
        """PPOTrainer.log_stats(callback=...) signature."""
        self.log(step, stats)
        if samples:
            self.samples(step, samples)

    def trainer_callback(self, total_steps: int | None = None, checkpoint_every: int = 0):
        """A TrainerCallback: logs go to `metrics`, progress to the run's row, stop_requested ends training
        after the current step (and saves, so the model is kept)."""
        from transformers import TrainerCallback

        sink = self

        class SQLiteCallback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                sink.progress(state.global_step, state.max_steps or total_steps)

            def on_log(self, args, state, control, logs=None, **kwargs):
                if state.is_world_process_zero and logs:
                    sink.log(state.global_step, logs)

            def on_step_end(self, args, state, control, **kwargs):
                sink.progress(state.global_step, state.max_steps or total_steps)
                if main_process_decides(sink.stop_requested()):
                    control.should_training_stop = True
                return control

        return SQLiteCallback()
