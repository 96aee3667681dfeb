"""A run's launcher: `python -m labeler.launcher <accelerate launch arguments> -m labeler.worker --db DB --run-id N`.

It is `accelerate launch` itself (the same parser and `launch_command`, in this process), plus one thing: when
a training process dies, it is the only process that knows which rank it was and how it ended (torch elastic's
agent, or accelerate's single-process launcher, holds the exit status). Rank 0 may have recorded only what it
saw, e.g. gloo's "Connection closed by peer" when its partner vanished, or nothing at all when it was rank 0
that was killed. After every rank has exited, this records on the run's row which rank died and how, where its
log is, and that `rlhf-studio runs resume N` continues from the last checkpoint (supervision.record_rank_failure).

It also lowers the training's CPU priority before anything starts (lower_priority), so the server's label
requests are not queued behind the trainer on a machine with few cores.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from labeler.services.execution import supervision
from storage import open_db

# The niceness training runs at (0-19, higher yields more): the environment variable overrides it, 0 turns it off.
NICENESS_ENV = "RLHF_STUDIO_TRAINING_NICE"
DEFAULT_NICENESS = 10


def lower_priority(niceness: int | None = None) -> int:
    """Run this process, and every process it starts after this, at `niceness` (default: $RLHF_STUDIO_TRAINING_NICE,
    else 10); returns the niceness now in effect. Never raises priority: a process already nicer stays as it is.

    Why: on 2 cores a PPO step keeps both busy for seconds at a time, and at equal priority a label request waits
    for its share behind the trainer's threads (p99 541-805 ms at load 4.5-12, 201 ms quiet). At niceness 10 the
    scheduler gives a nice-0 server about 10 times the trainer's weight when both want a core; the trainer still
    gets all the CPU nobody else wants. Two settings, because Linux has two places that decide: the nice value
    of the process (inherited by its threads and children), and, with autogroup scheduling on, the nice value of
    the session's autogroup (the worker is started in its own session, supervision.spawn), which otherwise competes
    with the server's session at equal weight whatever the process's own nice value."""
    if niceness is None:
        niceness = int(os.environ.get(NICENESS_ENV, DEFAULT_NICENESS))
    if not hasattr(os, "setpriority"):  # not a POSIX system
        return 0
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness > current:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)
        except OSError:
            return current
    try:  # /proc/self/autogroup exists where the kernel has autogroup; raising its nice needs no privilege
        autogroup = Path("/proc/self/autogroup")
        group_nice = int(autogroup.read_text().split("nice")[-1])
        if niceness > group_nice:
            autogroup.write_text(str(niceness))
    except (OSError, ValueError):
        pass
    return os.getpriority(os.PRIO_PROCESS, 0)


def _run_of(script_args: list[str]) -> tuple[str, int] | None:
    """(database file, run id) from the worker's own arguments; None when the script is not the worker."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db")
    parser.add_argument("--run-id", type=int)
    known, _ = parser.parse_known_args(script_args)
    return (known.db, known.run_id) if known.db and known.run_id is not None else None


def rank_log(log_dir: str | None, local_rank: int) -> Path | None:
    """The rank's own log as torch elastic's `--tee 3 --log_dir DIR` writes it,
    DIR/<rendezvous id>_<random>/attempt_<k>/<local rank>/stderr.log (a folder per launch: the newest is this
    one's); tracebacks go to stderr, prints to stdout.log beside it."""
    if not log_dir or not Path(log_dir).is_dir():
        return None
    found = sorted(Path(log_dir).glob(f"*/attempt_*/{local_rank}/stderr.log"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _record(script_args: list[str], failure: supervision.RankFailure,
            others: Sequence[supervision.RankFailure] = ()) -> None:
    run = _run_of(script_args)
    if run is None:
        return

    try:
        message = supervision.record_rank_failure(open_db(run[0]), run[1], failure, others)
    except Exception:  # noqa: BLE001 - the launch failed either way; its exit status still says so
        traceback.print_exc()
        return
    if message:
        print(f"run {run[1]}: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = launch_command_parser().parse_args(argv)
    script_args = list(args.training_script_args)
    lower_priority()  # before the ranks start: they inherit it
    try:
        launch_command(args)
    except ChildFailedError as error:  # several processes: torch elastic's agent stopped the others
        # torch's own root cause: the earliest failure; the agent adds the ranks it stopped after it.
        failures = {rank: supervision.RankFailure(rank=rank, pid=failure.pid, exitcode=failure.exitcode,
                                           log=rank_log(args.log_dir, failure.local_rank))
                    for rank, failure in error.failures.items()}
        first, _ = error.get_first_failure()
        _record(script_args, failures[first], [f for rank, f in failures.items() if rank != first])
        return 1
    except subprocess.CalledProcessError as error:  # one process (accelerate's simple launcher)
        _record(script_args, supervision.RankFailure(rank=0, pid=None, exitcode=error.returncode, log=None))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
