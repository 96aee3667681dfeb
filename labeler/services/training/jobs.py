"""Training runs as a queue: create, start, poll, stop early, cancel, resume, wait.

A run is a row in `runs` (the `runs` module; status queued -> running -> succeeded | failed | cancelled).
Starting one runs `python -m labeler.launcher ... -m labeler.worker --db DB --run-id N` (accelerate launch, which
also records how a dead training process ended; the `launch` module builds the command) as a fresh process in its
own session (never a fork of the server, so no Gradio threads or open connections are inherited); the worker
records its progress and heartbeat itself. By default one run executes at a time: the next queued run starts
when one ends (the worker starts it on its way out, and every `poll` does too). `max_concurrent` (argument, or
RLHF_STUDIO_MAX_RUNS) raises the limit.

A run whose process is gone while its row says running (server restart, OOM kill, machine reboot) is marked
failed by `poll` (`supervision.mark_dead_runs`), which the app calls at start and from its Train tab timer.
"""
from __future__ import annotations

import os
import shlex
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from labeler.services.execution import checkpoints, launch, runs, supervision
from labeler.services.settings import reward_spec
from labeler.services.training import run_settings, train_configs
from labeler.errors import InputError
from labeler.services.training.kept_models import keep_after_cancel
from labeler.services.settings.run_secrets import SECRET_SETTINGS, refuse_secrets  # noqa: F401 - callers import them here
from labeler.services.execution.runs import Run
from storage import write_transaction

MAX_RUNS_ENV = "RLHF_STUDIO_MAX_RUNS"


def create_run(db, stage: str, settings: dict[str, Any] | None = None, project: str = "default",
               username: str | None = None, name: str = "", runs_dir: str | Path = "runs",
               start: bool = True, max_concurrent: int | None = None, source: str | None = None,
               from_web: bool = False, check: Callable[[], None] | None = None) -> Run:
    """Queue a run after validating its settings (InputError before anything is written); start it when a
    slot is free (unless `start=False`).

    from_web=True (the Train tab) accepts only train_configs.web_settings(stage), an allowlist of numbers,
    switches and choices (a denylist had gaps: PPO's log_dir, project_kwargs, accelerator_kwargs were accepted
    and the worker wrote to that folder), and a built-in reward function only (not module:function): a web
    login cannot run code or write files as the server's user. Secrets (refuse_secrets) are refused from
    anywhere: a run's config is stored in the database and shown in the app.
    """
    refuse_secrets(settings or {}, source)
    if from_web:
        allowed = train_configs.web_settings(stage)
        refused = sorted(key for key in (settings or {}) if key not in allowed)
        refused += reward_spec.names_code(settings or {})  # a module:function reward names code to import
        if refused:
            raise InputError("can only be set from the command line (rlhf-studio train --set), not the web app",
                             field=", ".join(refused))
    # checked (the model, the reward, code it names: not 5 minutes later in the worker) and resolved: run_settings
    config = run_settings.resolve_run(db, project, stage, settings or {}, source).config
    if config["job"].get("accelerate_config"):  # a missing, unreadable or unrunnable file fails now, not at start
        job = config["job"]
        launch.refuse_unrunnable(launch.launch_settings(job.get("num_processes"), job["accelerate_config"])[1])
    if check is not None:  # the caller's own refusal (the Train tab: a run with no data), after the checks above
        check()
    run_id = runs.insert_run(db, stage, config, project, username, name, runs_dir)
    if start:
        start_queued(db, max_concurrent)
    return runs.get_run(db, run_id)


def _max_concurrent(value: int | None) -> int:
    return max(1, int(value if value is not None else os.environ.get(MAX_RUNS_ENV, "1")))


def start_queued(db, max_concurrent: int | None = None) -> list[int]:
    """Launch the oldest queued runs while fewer than `max_concurrent` are running. Returns launched ids.

    The run is claimed (status running, heartbeat now) inside one BEGIN IMMEDIATE transaction, so two
    processes polling at the same moment never launch the same run twice.
    """
    limit = _max_concurrent(max_concurrent)
    launched = []
    while True:
        with write_transaction(db):
            if runs.count_running(db) >= limit:
                break
            run_id = runs.oldest_queued(db)
            if run_id is None:
                break
            now = runs.utc_now()
            queued = runs.get_run(db, run_id)
            job = (queued.config or {}).get("job", {})
            try:
                if os.environ.get(launch.LAUNCHER_ENV, "accelerate") != "python":  # python: no accelerate setup read
                    launch.refuse_unrunnable(launch.launch_settings(job.get("num_processes"),
                                                                    job.get("accelerate_config"))[1])
                command = launch.worker_command(runs.db_file(db), run_id, job.get("num_processes"),
                                                job.get("accelerate_config"),
                                                rank_logs=Path(queued.output_dir) / launch.RANK_LOGS)
            except InputError as error:  # a missing or broken accelerate config fails this run, not the queue
                runs.mark_not_started(db, run_id, f"could not start the worker: {error}", now)
                continue
            runs.mark_started(db, run_id, shlex.join(command), now)
        try:
            pid = supervision.spawn(runs.get_run(db, run_id), command)
        except OSError as error:
            runs.finish(db, run_id, "failed", f"could not start the worker: {error}")
            continue
        runs.set_pid(db, run_id, pid)
        launched.append(run_id)
    return launched


def poll(db, max_concurrent: int | None = None, now: datetime | None = None) -> list[int]:
    """Mark dead running runs failed (supervision.mark_dead_runs), then start queued runs. Returns the ids
    marked failed."""
    dead = supervision.mark_dead_runs(db, now)
    start_queued(db, max_concurrent)
    return dead


def request_stop(db, run_id: int) -> Run:
    """Early stop: the worker ends after the current step, saves and registers the model (status succeeded)."""
    run = runs.get_run(db, run_id)
    if run.status not in ("queued", "running"):
        raise InputError(f"run {run_id} is {run.status}; only a queued or running run can be stopped", field="run_id")
    runs.mark_stop_requested(db, run_id)
    return runs.get_run(db, run_id)


def cancel_run(db, run_id: int, grace_seconds: float = 10.0, max_concurrent: int | None = None) -> Run:
    """Cancel: SIGTERM to every process of the run (run_processes), SIGKILL after `grace_seconds`. The model of
    its newest complete checkpoint is registered (kept_models); the checkpoint stays so the run can be resumed.
    A run already failed or cancelled whose processes still live (a launcher killed, its worker not) has them
    stopped and keeps its status."""
    run = runs.get_run(db, run_id)
    processes = supervision.run_processes(db, run) if run.pid else []
    if run.finished and not processes:
        raise InputError(f"run {run_id} already {run.status}", field="run_id")
    if not run.finished:
        # Mark first: the worker, seeing SIGTERM, then leaves the status alone.
        runs.finish(db, run_id, "cancelled", "cancelled by user", only_if=run.status)
    if run.output_dir and checkpoints.writing(Path(run.output_dir) / "checkpoints"):  # it finishes first
        grace_seconds = max(grace_seconds, checkpoints.WRITE_GRACE_SECONDS)
    if run.pid and (processes or (processes is None and run.status == "running")):
        supervision.terminate(run, processes, grace_seconds)
    if not run.finished:  # nothing trained is thrown away: its newest checkpoint is registered (kept_models)
        keep_after_cancel(db, run_id)
    start_queued(db, max_concurrent)
    return runs.get_run(db, run_id)


def resume_run(db, run_id: int, max_concurrent: int | None = None) -> Run:
    """Queue a failed or cancelled run again; its worker continues from the newest complete checkpoint."""
    run = runs.get_run(db, run_id)
    if run.status not in ("failed", "cancelled"):
        raise InputError(f"run {run_id} is {run.status}; only a failed or cancelled run can be resumed", field="run_id")
    # A run has one worker, ever: a process of the last attempt that still lives (its launcher was killed, not
    # the worker) would train on in the same folder beside the new one, and both would register a model.
    processes = supervision.run_processes(db, run) if run.pid else []
    if processes or (processes is None and supervision.group_alive(run.pid)):
        listed = f" (pids {', '.join(map(str, processes))})" if processes else ""
        raise InputError(f"run {run_id} still has processes running{listed}: stop them first with "
                         f"`rlhf-studio runs cancel {run_id}`, then resume", field="run_id")
    runs.requeue(db, run_id)
    start_queued(db, max_concurrent)
    return runs.get_run(db, run_id)


def wait(db, run_id: int, timeout: float | None = None, interval: float = 0.5) -> Run:
    """Block until the run ends (polling, so a dead worker is noticed); returns its final row (settled)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        run = runs.get_run(db, run_id)
        if run.finished:
            return supervision.settled(db, run)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} still {run.status} after {timeout} s")
        time.sleep(interval)
        poll(db)

