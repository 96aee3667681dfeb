"""The training process: `python -m labeler.worker --db DB --run-id N` (started by jobs.start_queued through
`accelerate launch`, a fresh process, never a fork of the server).

It owns the run's row while it lives: heartbeat every few seconds from a thread, progress and metrics through
the MetricsSink, the final status at the end (succeeded / failed with the error / cancelled on SIGTERM), the
trained model registered with its lineage, its checkpoints deleted once it has succeeded (unless the job keeps
them), and then it starts the next queued run.

With several processes (`accelerate launch --num_processes N`) every rank runs this module and trains; only
the main process (RANK 0) writes the run's row, heartbeat, metrics and status, registers the model and starts
the next run. The other ranks get a MetricsSink that writes nothing. When a rank fails, the launcher stops
the others with SIGTERM: the main process then marks the run failed (a user's cancel marks it first).
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable

from labeler.launcher import lower_priority
from labeler.services.evals import evaluation
from labeler.services.training import hub, jobs, runners, train_configs
from labeler.services.serving import models
from labeler.services.execution import checkpoints, runs, supervision
from labeler.services.execution.metrics_sink import MetricsSink
from labeler.services.training.stages import RunResult, StageContext
from storage import open_db


class Cancelled(BaseException):
    """Raised in the main thread by SIGTERM (BaseException: a trainer's `except Exception` must not eat it)."""


def _on_sigterm(signum, frame):
    # One stop is enough: a cancel can deliver SIGTERM twice (to the process group, and forwarded by the launcher),
    # and a second Cancelled raised inside the handler below would escape it half-way through marking the row.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Cancelled()


def say(run_id: int, line: str) -> None:
    """One line of the run's log, with the wall-clock time (UTC): a run's phases (training, saving, evaluation)
    are told apart in its log by when each began, as a team reading a slow run needs."""
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}] run {run_id}: {line}", flush=True)


# ---- the dispatch: which function trains a run's stage, and what is registered afterwards ----------------

def runner_for(ctx: StageContext) -> Callable[[StageContext], RunResult]:
    """The job's own runner (module:function, CLI only) or the built-in one of its stage."""
    if ctx.job.runner:
        module_name, _, function = ctx.job.runner.partition(":")
        return getattr(importlib.import_module(module_name), function)
    return runners.RUNNERS[ctx.stage]


def run_stage(ctx: StageContext) -> RunResult:
    ctx.output_dir.mkdir(parents=True, exist_ok=True)
    return runner_for(ctx)(ctx)


def register_result(db, ctx: StageContext, result: RunResult) -> dict:
    """Register the trained model with its lineage: base model, run, config, final metrics, data snapshot."""
    run_config = runs.get_run(db, ctx.run_id).config
    # A run registers one model, ever (a launcher killed, its worker left running and the run resumed beside
    # it once registered two models for one folder). An attempt killed after registering (during the
    # evaluation) and resumed finds its own folder registered: that registration stands.
    earlier = models.model_of_run(db, ctx.run_id)
    if earlier is not None:
        if Path(earlier["path"]).resolve() != Path(result.path).resolve():
            raise RuntimeError(f"run {ctx.run_id} already registered model {earlier['name']!r} "
                               f"({earlier['path']}); this worker's output ({result.path}) is not registered")
        say(ctx.run_id, f"its model is registered already, as {earlier['name']!r}")
        return models.get_model(db, earlier["name"])
    name = ctx.job.output_name or f"{ctx.stage}-run{ctx.run_id}"
    if models.model_exists(db, name):
        name = f"{name}-run{ctx.run_id}"  # a reused output name must not fail a finished training
    metrics = {**ctx.sink.final_metrics(), **result.metrics}
    registered = models.register_model(
        db, name, result.path, result.kind, base_model=result.base_model, run_id=ctx.run_id,
        config={"stage": ctx.stage, **run_config}, metrics=metrics, data_snapshot=result.data_snapshot,
    )
    hub.write_registered_model_card(db, name)  # README.md in the folder: base model, run settings, metrics, data
    return registered


def _heartbeat(db_path: str, run_id: int, stop: threading.Event) -> None:
    sink = MetricsSink(db_path, run_id)  # its own connection: one per thread
    while not stop.wait(supervision.HEARTBEAT_SECONDS):
        try:
            sink.heartbeat()
        except Exception as error:  # a locked database for 30 s: try again next beat
            print(f"heartbeat failed: {error}", file=sys.stderr, flush=True)


def _evaluate(db, ctx, registered: dict) -> None:
    """The automatic held-out evaluation of a finished policy run (labeler/services/evals/evaluation.py), before the
    run turns succeeded so the Train tab's before/after table is there when it does. A failure is logged and
    does not fail the run: the model is trained and registered, and `rlhf-studio eval` can evaluate it later."""
    try:
        after = evaluation.evaluate_finished_run(db, ctx.run_id, ctx.stage, ctx.project, ctx.job, registered,
                                                 sink=ctx.sink,
                                                 log=lambda line: say(ctx.run_id, line))
        if after is not None:  # the cards' evaluation tables gain the model's row and its base's
            hub.write_model_cards(db, [after.model, after.kl_base or after.model])
    except Exception:  # noqa: BLE001 - see the docstring; Cancelled (a BaseException) still ends the run
        traceback.print_exc()
        say(ctx.run_id, f"evaluation failed (the model is registered; try `rlhf-studio eval --model "
                        f"{registered['name']}`)")


def remove_checkpoints(ctx: StageContext) -> None:
    """A run that succeeded needs its checkpoints no more (they resume a run that did not finish; its model is
    saved): deleted unless the job keeps them. A failure here is logged and leaves the run succeeded."""
    if ctx.job.keep_checkpoints:
        return
    try:
        freed = checkpoints.remove_all(ctx.checkpoint_root)
    except OSError:
        traceback.print_exc()
        return
    if freed:
        say(ctx.run_id, f"checkpoints deleted ({freed / 1e9:.2f} GB; keep_checkpoints=true keeps them)")


def rank() -> tuple[int, int]:
    """(this process's rank, number of processes), as the launcher (torchrun, accelerate launch) sets them."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def run_worker(db_path: str, run_id: int) -> str:
    """Execute one run; returns its final status."""
    process, world = rank()
    if process != 0:
        return _run_other_rank(db_path, run_id, process)
    db = open_db(db_path)
    run = runs.get_run(db, run_id)
    if run.status != "running":
        say(run_id, f"{run.status}, not running: nothing to do")
        return run.status
    signal.signal(signal.SIGTERM, _on_sigterm)
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(db_path, run_id, stop), daemon=True)
    beat.start()
    status = "failed"
    try:
        import torch

        # The thread count is in the log because it decides the speed: accelerate launch gives each process
        # OMP_NUM_THREADS=1 unless told otherwise (launch.worker_command tells it).
        say(run_id, f"stage {run.stage}, torch threads {torch.get_num_threads()}, config {run.config}")
        ctx = StageContext(
            run_id=run_id, db_path=db_path, stage=run.stage, project=run.project,
            job=train_configs.load_job_config(run.config), trainer_settings=dict(run.config.get("trainer", {})),
            output_dir=Path(run.output_dir), sink=MetricsSink(db_path, run_id),
        )
        result = run_stage(ctx)
        say(run_id, f"trained; model saved at {result.path}")
        # The trainer, its model and optimizer state sit in reference cycles that outlive run_stage until the
        # collector runs: collected here, or the evaluation loads the tuned model beside them (measured with the
        # 135M model: 0.54 GB of the training's tensors alive after a DPO run; on a GPU, a second model's memory).
        evaluation.free_memory()
        registered = register_result(db, ctx, result)
        _evaluate(db, ctx, registered)
        # Only a running row turns into succeeded: a cancel that raced the last step keeps its status.
        if runs.finish(db, run_id, "succeeded"):
            status = "succeeded"
            remove_checkpoints(ctx)
        say(run_id, f"{runs.get_run(db, run_id).status}; model at {result.path}")
    except Cancelled:
        if world > 1:
            # A user's cancel marks the row before signalling (then this changes nothing); otherwise the
            # launcher is stopping the ranks because one of them failed.
            runs.finish(db, run_id, "failed", "stopped by SIGTERM: another training process failed (see the log)")
        else:
            runs.finish(db, run_id, "cancelled", "cancelled (SIGTERM)")
        status = runs.get_run(db, run_id).status
        say(run_id, status)
    except BaseException as error:  # noqa: BLE001 - every failure must reach the run's row
        traceback.print_exc()
        message = f"{type(error).__name__}: {error}".strip()
        runs.finish(db, run_id, "failed", message[-2000:])
        status = "failed"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stop.set()
    try:
        jobs.start_queued(db)
    except Exception:
        traceback.print_exc()
    return status


def _run_other_rank(db_path: str, run_id: int, process: int) -> str:
    """A rank other than the main process: train (the collectives need every rank) and write nothing. Its
    exit status reaches the launcher, which stops the other ranks when it is not 0."""
    run = runs.get_run(open_db(db_path), run_id)
    if run.status != "running":
        return run.status
    ctx = StageContext(
        run_id=run_id, db_path=db_path, stage=run.stage, project=run.project,
        job=train_configs.load_job_config(run.config), trainer_settings=dict(run.config.get("trainer", {})),
        output_dir=Path(run.output_dir), sink=MetricsSink(db_path, run_id, writes=False),
    )
    try:
        run_stage(ctx)
    except BaseException:  # noqa: BLE001 - printed with the rank; the exit status fails the run
        say(run_id, f"rank {process} failed")
        traceback.print_exc()
        return "failed"
    return "succeeded"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labeler.worker", description="Run one queued training run.")
    parser.add_argument("--db", required=True, help="SQLite database file")
    parser.add_argument("--run-id", type=int, required=True, help="id of the run (status running)")
    args = parser.parse_args(argv)

    lower_priority()  # started without the launcher (RLHF_STUDIO_LAUNCHER=python) too; see launcher.lower_priority
    status = run_worker(str(Path(args.db).resolve()), args.run_id)
    return 0 if status in ("succeeded", "cancelled") else 1


if __name__ == "__main__":
    sys.exit(main())
