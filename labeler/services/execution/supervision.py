"""The processes behind a run: starting its worker, telling whether it still lives, stopping it, and recording
which training process died and how (the launcher's account of a dead rank).

A run whose process is gone while its row says running (server restart, OOM kill, machine reboot), or that has
written no heartbeat for STALE_SECONDS, is marked failed by `mark_dead_runs` (`jobs.poll` calls it; the app polls
at start and from its Train tab timer).
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from labeler.services.execution import checkpoints, launch, runs
from labeler.services.execution.runs import Run
from storage import write_transaction

HEARTBEAT_SECONDS = 5.0  # how often a worker writes its heartbeat (labeler/worker.py)
# A running row whose worker has not written a heartbeat for this long is considered dead even if a process
# with its pid exists (the pid may have been reused after a reboot). Generous: a live worker whose heartbeat
# lagged past 60 s on a 2-core machine at load 19 was stopped mid-run, and a false kill throws away a run (and
# with it the labels people gave it); a hung worker waits three minutes longer to be noticed.
STALE_SECONDS = 180.0
SILENT_STOP_GRACE_SECONDS = 5.0  # a silent worker gets this long after SIGTERM before SIGKILL
KILL_WAIT_SECONDS = 10.0  # longest wait for SIGKILLed processes to be gone
# After rank 0 marks a run failed, its launcher may still be stopping the other ranks (torch elastic waits up to
# 30 s for them) before it records which rank died: settled() gives it this long.
LAUNCHER_EXIT_SECONDS = 45.0


def spawn(run: Run, command: list[str]) -> int:
    """Start a run's `command` in a session of its own, its output appended to the run's log; returns its pid."""
    # Private to the server's user: a run's folder holds its checkpoints and the log of everything it printed;
    # a runs folder created here is the owner's alone too. Folders and files that exist keep their modes.
    output = Path(run.output_dir)
    if not output.parent.exists():
        output.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    output.mkdir(mode=0o700, exist_ok=True)
    log = os.fdopen(os.open(run.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONUNBUFFERED"] = "1"
    # OpenMP threads that sleep instead of spinning while waiting: on a CPU shared with other work (the server,
    # other users) spinning threads made generation 10x slower (measured: 136 s vs 10 s per batch).
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.update(launch.launch_env(command))
    # The project root on the path, so `-m labeler.worker` works from any working directory.
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    # start_new_session: the worker and accelerate's child form their own process group, which cancel signals
    # as a whole, and a Ctrl-C in the server's terminal does not reach them.
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env=env, start_new_session=True, close_fds=True)
    log.close()
    # Reap the child when it exits so it never lingers as a zombie that looks alive to mark_dead_runs().
    threading.Thread(target=process.wait, daemon=True, name=f"reap-run-{run.id}").start()
    return process.pid


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie answers kill(0) but is dead
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


@dataclass(frozen=True)
class RankFailure:
    """How a training process ended, as its launcher saw it (labeler/launcher.py)."""
    rank: int  # global rank (RANK)
    pid: int | None
    exitcode: int  # negative: killed by signal -exitcode (subprocess' convention, which torch elastic keeps)
    log: Path | None  # the rank's own log, when the launch kept one per rank

    def how(self) -> str:
        if self.exitcode < 0:
            try:
                name = signal.Signals(-self.exitcode).name
            except ValueError:
                name = "unknown signal"
            return f"was killed by signal {-self.exitcode} ({name})"
        return f"exited with code {self.exitcode}"


# What rank 0 records when it failed only because another rank went away (gloo's words for a vanished peer,
# or the worker's SIGTERM handler): such a rank 0 is a consequence, never the root cause.
PEER_LOST_MARKERS = ("Connection closed by peer", "Connection reset by peer", "another training process failed")


def record_rank_failure(db, run_id: int, failure: RankFailure,
                        others: Sequence[RankFailure] = ()) -> str | None:
    """Record on the run's row which training process died and how, once every rank has exited; returns the
    error written, or None when the row already says it better.

    `failure` is torch elastic's root cause (the earliest failure it saw) and `others` the ranks that failed
    beside it. Its clock counts whole seconds, so when a rank exits and rank 0 fails on the lost connection
    within the same second, rank 0 may come first: a rank 0 whose recorded error says its peer was lost then
    gives way to the other rank.

    Rank 0 writes the row. When another rank dies, rank 0 records only what it saw (gloo's "Connection closed
    by peer", or the launcher's SIGTERM); when rank 0 itself is killed (SIGKILL, the OOM killer) nothing is
    recorded and the row still says running. Both get this account, with rank 0's words kept at the end. A
    rank 0 that failed on its own and recorded its exception keeps that error, as does a cancelled or succeeded
    run. One line: `runs show` and `train --wait` print an error's last line.
    """
    with write_transaction(db):
        run = runs.find_run(db, run_id)
        if run is None or run.status not in ("running", "failed"):
            return None
        lost_peer = any(marker in (run.error or "") for marker in PEER_LOST_MARKERS)
        if failure.rank == 0 and lost_peer and any(other.rank != 0 for other in others):
            failure = min((other for other in others if other.rank != 0), key=lambda other: other.rank)
        if run.status == "failed" and failure.rank == 0 and run.error:
            return None
        who = f"rank {failure.rank}" + (f" (pid {failure.pid})" if failure.pid else "")
        parts = [f"training process {who} {failure.how()}; its log: {failure.log or run.log_path}"]
        if run.status == "failed" and run.error:
            before = " ".join(run.error.split())
            parts.append(f"the other ranks were stopped (rank 0 recorded: {before[:300]})")
        checkpoint = checkpoints.latest_checkpoint(Path(run.output_dir) / "checkpoints")
        parts.append(f"`rlhf-studio runs resume {run_id}` continues from {checkpoint}" if checkpoint else
                     f"`rlhf-studio runs resume {run_id}` starts it again (no complete checkpoint yet)")
        message = "; ".join(parts)
        runs.record_failure(db, run_id, message)
    return message


def is_run_worker(pid: int, run_id: int) -> bool:
    """Whether `pid` is still this run's worker (or its launcher): the leader of its own process group, running
    labeler.worker with this run id. A silent run's pid may have been reused by an unrelated process, whose group
    must never be signalled. Without /proc (not Linux) this answers False: the run is marked, not stopped."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        leader = os.getpgid(pid) == pid
    except (OSError, ProcessLookupError):
        return False
    named = any(a == "--run-id" and b == str(run_id) for a, b in zip(args, args[1:]))
    return leader and named and "labeler.worker" in args


def _names_run(pid: int, args: list[str], run_id: int, database: str) -> bool:
    """Whether a command line runs labeler.worker (directly or through labeler.launcher) for this run of this
    database: `--run-id N` and a `--db` that is the same file (run ids start at 1 in every database)."""
    if "labeler.worker" not in args or not any(a == "--run-id" and b == str(run_id) for a, b in zip(args, args[1:])):
        return False
    for flag, value in zip(args, args[1:]):
        if flag == "--db":
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                cwd = os.getcwd()
            return os.path.realpath(os.path.join(cwd, value)) == os.path.realpath(database)
    return False


def run_processes(db, run: Run) -> list[int] | None:
    """The live processes of a run, whoever started them: every process whose command line runs this run's
    worker on this database (the launcher, the worker, each rank: torch elastic starts every rank in a session of
    its own, so the run's process group does not hold them all), and every other member of the process group
    the run was launched as (`runs.pid`) while one of those lives. Zombies are dead. None without /proc (not
    Linux): then only the recorded group can be checked (group_alive)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    database = runs.db_file(db)
    named, groups = [], {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if fields[0] == "Z":
            continue
        groups[pid] = int(fields[2])
        if _names_run(pid, args, run.id, database):
            named.append(pid)
    if run.pid and any(groups.get(pid) == run.pid for pid in named):
        named += [pid for pid, group in groups.items() if group == run.pid and pid not in named]
    return sorted(named)


def mark_dead_runs(db, now: datetime | None = None) -> list[int]:
    """Mark dead running runs failed (no process of the run left, or no heartbeat for STALE_SECONDS; a silent
    run's processes are stopped). Returns the ids marked failed.

    Alive means any process of the run (run_processes), not only the recorded pid: that is the launcher, and a
    worker whose launcher was killed goes on training and heartbeating. Marking such a run failed let `runs
    resume` start a second worker on the same folder, and both registered a model."""
    now = now or datetime.now(timezone.utc)
    dead = []
    for run in runs.list_runs(db, status="running", limit=1000):
        heartbeat = runs.parse_time(run.heartbeat_at) if run.heartbeat_at else None
        silent = heartbeat is None or (now - heartbeat).total_seconds() > STALE_SECONDS
        processes = run_processes(db, run) if run.pid is not None else []
        # Its recorded group (the pid included) or any process named as its worker; only a named one (or, without
        # /proc, the recorded leader) is ever signalled: a silent run's pid may belong to a stranger by now.
        alive = bool(processes) or (run.pid is not None and (pid_alive(run.pid) or group_alive(run.pid)))
        ours = bool(processes) or (processes is None and alive and is_run_worker(run.pid, run.id))
        gone = silent if run.pid is None else (not alive or silent)  # pid None: claimed, never launched
        if gone:
            reason = ("the worker process is gone" if not alive else
                      f"no heartbeat for {STALE_SECONDS:.0f} s, the worker was stopped" if ours else "no heartbeat")
            if runs.finish(db, run.id, "failed", f"{reason} (pid {run.pid}); see {run.log_path}"):
                dead.append(run.id)
                if ours:
                    # Alive but silent (stopped, swapping, stuck in C code): marked failed first (its SIGTERM
                    # handler then leaves the status alone), then stopped, so a resume never runs a second
                    # worker on the same folder.
                    terminate(run, processes, SILENT_STOP_GRACE_SECONDS)
    return dead


def terminate(run: Run, processes: list[int] | None, grace_seconds: float) -> None:
    """SIGTERM to each of the run's `processes` (ranks lead groups of their own) and to the group it was launched
    as when one of them is in it (without /proc, `processes` is None: that group alone), then SIGKILL to whatever
    is left after `grace_seconds`."""
    members = processes or []
    group = run.pid if processes is None else None
    for pid in members:
        try:
            if os.getpgid(pid) == run.pid:
                group = run.pid
        except OSError:
            pass

    def signal_all(sig: int) -> None:
        targets = [(os.kill, pid) for pid in members] + ([(os.killpg, group)] if group else [])
        for send, target in targets:
            try:
                send(target, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def gone() -> bool:
        return not (group and group_alive(group)) and not any(pid_alive(pid) for pid in members)

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.1)
    signal_all(signal.SIGKILL)
    # SIGKILL is delivered at once, but a busy machine may take a moment to end the process: the caller (a
    # resume right after a cancel) must find the run's processes gone.
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)


def group_alive(pgid: int) -> bool:
    """Any process of the group left? (accelerate's launcher may exit before the worker it started.)"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid_alive(pgid) or _members_alive(pgid)


def _members_alive(pgid: int) -> bool:
    # killpg(0) also answers for zombies; look for a live (non-zombie) member in /proc where there is one.
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def settled(db, run: Run, interval: float = 0.2) -> Run:
    """A finished run's row once its launcher is done with it: a failed run's launcher may still be stopping
    the other ranks and then records which rank died (record_rank_failure), for up to LAUNCHER_EXIT_SECONDS."""
    deadline = time.monotonic() + LAUNCHER_EXIT_SECONDS
    while run.status == "failed" and run.pid and is_run_worker(run.pid, run.id) and time.monotonic() < deadline:
        time.sleep(interval)
    return runs.get_run(db, run.id)

