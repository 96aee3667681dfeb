"""The `runs` table: a training run's row (`Run`), and the one module that reads and writes it.

A run's status goes queued -> running -> succeeded | failed | cancelled. `jobs` decides when a row changes (queue,
start, stop, cancel, resume), `supervision` watches the processes behind it; both change the row only through the
functions here. Functions documented "inside the caller's write_transaction" write with `db.conn` and open no
transaction of their own, so a claim (read, then write) stays one BEGIN IMMEDIATE.
A `Run` carries its project's and creator's names, joined in the one query that reads a run.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from labeler.services.settings import training_stages
from labeler.services.data.accounts import get_user
from labeler.errors import InputError, PermissionDenied
from labeler.services.data.labeling import release_ended_run
from labeler.services.data.projects import get_project
from storage import write_transaction

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINAL = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class Run:
    id: int
    project: str
    stage: str
    name: str
    status: str
    config: dict = field(repr=False)
    command: str
    pid: int | None
    log_path: str
    output_dir: str
    error: str
    step: int
    total_steps: int
    stop_requested: bool
    created_by: str | None
    created_at: str
    started_at: str | None
    ended_at: str | None
    heartbeat_at: str | None

    @property
    def finished(self) -> bool:
        return self.status in FINAL

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / self.total_steps) if self.total_steps else 0.0

    def elapsed_seconds(self, now: datetime | None = None) -> float | None:
        if not self.started_at:
            return None
        end = parse_time(self.ended_at) if self.ended_at else (now or datetime.now(timezone.utc))
        return max(0.0, (end - parse_time(self.started_at)).total_seconds())

    def eta_seconds(self, now: datetime | None = None) -> float | None:
        """Remaining time at the average pace so far (None before the first step)."""
        elapsed = self.elapsed_seconds(now)
        if self.status != "running" or not elapsed or not self.step or not self.total_steps:
            return None
        return elapsed / self.step * max(0, self.total_steps - self.step)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """A time stored by utc_now, as an aware UTC datetime."""
    return datetime.strptime(text.replace("Z", ""), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)


def db_file(db) -> str:
    """The absolute file path of an open database (the worker opens its own connection to it)."""
    for row in db.execute("PRAGMA database_list").fetchall():
        if row[1] == "main" and row[2]:
            return str(Path(row[2]).resolve())
    raise InputError("training runs need a database file, not an in-memory database", field="db")


# ---- reads --------------------------------------------------------------------------------------------------

_SELECT = (
    "SELECT r.*, p.name AS project, u.username AS created_by_name FROM runs r JOIN projects p ON p.id = r.project_id"
    " LEFT JOIN users u ON u.id = r.created_by"
)


def _row_to_run(row) -> Run:
    row = dict(row)
    return Run(
        id=row["id"], project=row["project"], stage=row["stage"], name=row["name"], status=row["status"],
        config=json.loads(row["config_json"] or "{}"), command=row["command"], pid=row["pid"],
        log_path=row["log_path"], output_dir=row["output_dir"], error=row["error"], step=row["step"],
        total_steps=row["total_steps"], stop_requested=bool(row["stop_requested"]),
        created_by=row["created_by_name"], created_at=row["created_at"], started_at=row["started_at"],
        ended_at=row["ended_at"], heartbeat_at=row["heartbeat_at"],
    )


def find_run(db, run_id: int) -> Run | None:
    row = db.execute(f"{_SELECT} WHERE r.id = ?", [int(run_id)]).fetchone()
    return None if row is None else _row_to_run(row)


def get_run(db, run_id: int) -> Run:
    """The run with this id; an InputError naming it when there is none."""
    run = find_run(db, run_id)
    if run is None:
        raise InputError(f"no run with id {run_id}", field="run_id")
    return run


def list_runs(db, project: str | None = None, status: str | None = None, limit: int = 50) -> list[Run]:
    where, params = [], []
    if project is not None:
        where.append("p.name = ?")
        params.append(project)
    if status is not None:
        where.append("r.status = ?")
        params.append(status)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = db.execute(f"{_SELECT}{clause} ORDER BY r.id DESC LIMIT ?", [*params, int(limit)]).fetchall()
    return [_row_to_run(row) for row in rows]


def stop_requested(db, run_id: int) -> bool:
    """The early-stop flag (False for an unknown run): the worker's metrics sink reads it after each step."""
    row = db.execute("SELECT stop_requested FROM runs WHERE id = ?", [int(run_id)]).fetchone()
    return bool(row and row[0])


def run_of_folder(db, folder: Path) -> Run | None:
    """The newest run whose output folder holds `folder` (a checkpoint or model it wrote), or None."""
    folder = Path(folder)
    for row in db.execute("SELECT id, output_dir FROM runs WHERE output_dir != '' ORDER BY id DESC").fetchall():
        if folder.is_relative_to(Path(row["output_dir"])):
            return get_run(db, row["id"])
    return None


def count_running(db) -> int:
    return db.execute("SELECT COUNT(*) FROM runs WHERE status = 'running'").fetchone()[0]


def oldest_queued(db) -> int | None:
    """The id of the run queued first, or None."""
    row = db.execute("SELECT id FROM runs WHERE status = 'queued' ORDER BY id LIMIT 1").fetchone()
    return None if row is None else row[0]


# ---- writes -------------------------------------------------------------------------------------------------

def _user_id(db, username: str | None) -> int | None:
    if username is None:
        return None
    user = get_user(db, username)
    if user is None:
        raise PermissionDenied(f"unknown user {username!r}")
    return user.id


def insert_run(db, stage: str, config: dict[str, Any], project: str, username: str | None, name: str,
               runs_dir: str | Path) -> int:
    """A queued row with its output folder (inside `runs_dir`) and log path; returns its id. An unknown stage (the
    stage registry's) or project is an InputError and an unknown user PermissionDenied, before anything is written."""
    training_stages.get(stage)  # the registry is the list of stages (storage/migrations.py: the schema keeps none)
    project_id = get_project(db, project).id
    user_id = _user_id(db, username)
    with write_transaction(db):
        cursor = db.conn.execute(
            "INSERT INTO runs (project_id, stage, name, status, config_json, created_by) VALUES (?, ?, ?, 'queued', ?, ?)",
            [project_id, stage, name, json.dumps(config, sort_keys=True), user_id],
        )
        run_id = cursor.lastrowid
        # Not the id alone: a recreated database numbers its runs from 1 again, and its run 1 must never find
        # (and resume from) an old run 1's checkpoints in the same folder.
        output_dir = Path(runs_dir).resolve() / f"run-{run_id}-{secrets.token_hex(4)}"
        db.conn.execute(
            "UPDATE runs SET output_dir = ?, log_path = ?, name = ? WHERE id = ?",
            [str(output_dir), str(output_dir / "worker.log"), name or f"{stage}-run{run_id}", run_id],
        )
    return run_id


def record_progress(db, run_id: int, step: int | None = None, total_steps: int | None = None) -> None:
    """The worker's heartbeat on its run's row, with the step reached (and the total) when given. The one
    writer of step, total_steps and heartbeat_at besides start-up (the metrics sink calls it)."""
    fields, values = ["heartbeat_at = ?"], [utc_now()]
    if step is not None:
        fields.append("step = ?")
        values.append(int(step))
    if total_steps is not None:
        fields.append("total_steps = ?")
        values.append(int(total_steps))
    with write_transaction(db):
        db.conn.execute(f"UPDATE runs SET {', '.join(fields)} WHERE id = ?", [*values, run_id])


def mark_started(db, run_id: int, command: str, now: str) -> None:
    """Claim a queued run for launching (inside the caller's write_transaction): running, heartbeat now, no pid
    yet, the command it will execute."""
    db.conn.execute(
        "UPDATE runs SET status = 'running', pid = NULL, started_at = COALESCE(started_at, ?),"
        " heartbeat_at = ?, ended_at = NULL, error = '', command = ? WHERE id = ?",
        [now, now, command, run_id],
    )


def mark_not_started(db, run_id: int, error: str, now: str) -> None:
    """A queued run whose worker could not be started, failed (inside the caller's write_transaction)."""
    db.conn.execute("UPDATE runs SET status = 'failed', error = ?, ended_at = ? WHERE id = ?", [error, now, run_id])


def set_pid(db, run_id: int, pid: int) -> None:
    """The launched process of a running run (a run that ended meanwhile keeps its row as it is)."""
    with write_transaction(db):
        db.conn.execute("UPDATE runs SET pid = ? WHERE id = ? AND status = 'running'", [pid, run_id])


def finish(db, run_id: int, status: str, error: str = "", only_if: str = "running") -> bool:
    """Set a final status (and error) when the row's status is `only_if`; whether it changed."""
    with write_transaction(db):
        cursor = db.conn.execute(
            f"UPDATE runs SET status = ?, error = ?, ended_at = ? WHERE id = ? AND status = ?",
            [status, error, utc_now(), run_id, only_if],
        )
        if cursor.rowcount == 1:
            # An ended run waits for no label: its rollouts stop jumping the queue at once (same transaction).
            release_ended_run(db, run_id)
    return cursor.rowcount == 1


def record_failure(db, run_id: int, error: str) -> None:
    """A running or failed run failed with `error`, keeping the end time it has (inside the caller's
    write_transaction): the launcher's account of a dead rank, written after the ranks exited."""
    db.conn.execute("UPDATE runs SET status = 'failed', error = ?, ended_at = COALESCE(ended_at, ?) WHERE id = ?",
                    [error, utc_now(), run_id])


def append_error(db, run_id: int, text: str) -> None:
    """Add `text` to the run's error (a cancelled run whose checkpoint could not be kept says so)."""
    with write_transaction(db):
        db.conn.execute("UPDATE runs SET error = error || ? WHERE id = ?", [text, run_id])


def mark_stop_requested(db, run_id: int) -> None:
    """Ask the worker to end after its current step; a queued run that is asked to stop never starts."""
    with write_transaction(db):
        db.conn.execute("UPDATE runs SET stop_requested = 1 WHERE id = ?", [run_id])
        db.conn.execute("UPDATE runs SET status = 'cancelled', ended_at = ? WHERE id = ? AND status = 'queued'",
                        [utc_now(), run_id])


def requeue(db, run_id: int) -> None:
    """Queue an ended run again, as if never started (its worker resumes from its checkpoints)."""
    with write_transaction(db):
        db.conn.execute(
            "UPDATE runs SET status = 'queued', stop_requested = 0, error = '', ended_at = NULL, pid = NULL WHERE id = ?",
            [run_id],
        )
