"""Training runs: create, queue, launch, poll, cancel, early-stop, resume. SQLite is the source of truth.

A run is a row in `runs` (status queued -> running -> succeeded | failed | cancelled). Launching starts
`python -m labeler.launcher ... -m labeler.worker --db DB --run-id N` (accelerate launch, which also records how a
dead training process ended) as a fresh process in its own session (never a fork of the server, so no Gradio
threads or open connections are inherited); the worker records its progress and heartbeat itself. By default
one run executes at a time: the next queued run starts when one ends (the worker starts it on its way out, and
every `poll` does too). `max_concurrent` (argument, or RLHF_STUDIO_MAX_RUNS)
raises the limit.

A run whose process is gone while its row says running (server restart, OOM kill, machine reboot) is marked
failed by `poll`, which the app calls at start and from its Train tab timer.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from labeler.services import train_configs
from labeler.services.errors import InputError, PermissionDenied
from storage import write_transaction

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # cursor moves and colours that progress bars write
FINAL = ("succeeded", "failed", "cancelled")
HEARTBEAT_SECONDS = 5.0
# A running row whose worker has not written a heartbeat for this long is considered dead even if a process
# with its pid exists (the pid may have been reused after a reboot). Generous: a live worker whose heartbeat
# lagged past 60 s on a 2-core machine at load 19 was stopped mid-run, and a false kill throws away a run (and
# with it the labels people gave it); a hung worker waits three minutes longer to be noticed.
STALE_SECONDS = 180.0
SILENT_STOP_GRACE_SECONDS = 5.0  # a silent worker gets this long after SIGTERM before SIGKILL
KILL_WAIT_SECONDS = 10.0  # longest wait for SIGKILLed processes to be gone
MAX_RUNS_ENV = "RLHF_STUDIO_MAX_RUNS"
LAUNCHER_ENV = "RLHF_STUDIO_LAUNCHER"  # "accelerate" (default) or "python" (no accelerate wrapper)
ACCELERATE_CONFIG_ENV = "RLHF_STUDIO_ACCELERATE_CONFIG"  # the server-wide accelerate config file (YAML)
NUM_PROCESSES_ENV = "RLHF_STUDIO_NUM_PROCESSES"  # the server-wide number of training processes
RANK_LOGS = "ranks"  # in a run's folder: each rank's own stdout.log / stderr.log when it has several processes
# After rank 0 marks a run failed, its launcher may still be stopping the other ranks (torch elastic waits up to
# 30 s for them) before it records which rank died: wait() gives it this long.
LAUNCHER_EXIT_SECONDS = 45.0


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
        end = _parse_time(self.ended_at) if self.ended_at else (now or datetime.now(timezone.utc))
        return max(0.0, (end - _parse_time(self.started_at)).total_seconds())

    def eta_seconds(self, now: datetime | None = None) -> float | None:
        """Remaining time at the average pace so far (None before the first step)."""
        elapsed = self.elapsed_seconds(now)
        if self.status != "running" or not elapsed or not self.step or not self.total_steps:
            return None
        return elapsed / self.step * max(0, self.total_steps - self.step)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


def _parse_time(text: str) -> datetime:
    return datetime.strptime(text.replace("Z", ""), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)


def db_file(db) -> str:
    """The absolute file path of an open database (the worker opens its own connection to it)."""
    for row in db.execute("PRAGMA database_list").fetchall():
        if row[1] == "main" and row[2]:
            return str(Path(row[2]).resolve())
    raise InputError("training runs need a database file, not an in-memory database", field="db")


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


def get_run(db, run_id: int) -> Run:
    row = db.execute(f"{_SELECT} WHERE r.id = ?", [int(run_id)]).fetchone()
    if row is None:
        raise InputError(f"no run with id {run_id}", field="run_id")
    return _row_to_run(row)


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


def _project_id(db, project: str) -> int:
    row = db.execute("SELECT id FROM projects WHERE name = ?", [project]).fetchone()
    if row is None:
        raise InputError(f"unknown project {project!r}", field="project")
    return row[0]


def _user_id(db, username: str | None) -> int | None:
    if username is None:
        return None
    row = db.execute("SELECT id FROM users WHERE username = ?", [username]).fetchone()
    if row is None:
        raise PermissionDenied(f"unknown user {username!r}")
    return row[0]


def create_run(db, stage: str, settings: dict[str, Any] | None = None, project: str = "default",
               username: str | None = None, name: str = "", runs_dir: str | Path = "runs",
               start: bool = True, max_concurrent: int | None = None, source: str | None = None,
               from_web: bool = False) -> Run:
    """Queue a run after validating its settings (InputError before anything is written); start it when a
    slot is free (unless `start=False`).

    from_web=True (the Train tab) accepts only train_configs.web_settings(stage), an allowlist of numbers,
    switches and choices (a denylist had gaps: PPO's log_dir, project_kwargs, accelerator_kwargs were accepted
    and the worker wrote to that folder), and a built-in reward function only (not module:function): a web
    login cannot run code or write files as the server's user. Secrets (refuse_secrets) are refused from
    anywhere: a run's config is stored in the database and shown in the app.
    """
    refuse_secrets(settings or {})
    if from_web:
        allowed = train_configs.web_settings(stage)
        refused = sorted(key for key in (settings or {}) if key not in allowed)
        if ":" in str((settings or {}).get("reward_function", "")):
            refused.append("reward_function")  # a module:function names code to import
        if refused:
            raise InputError("can only be set from the command line (rlhf-studio train --set), not the web app",
                             field=", ".join(refused))
    config = train_configs.resolve_run_config(stage, settings or {}, source)
    if config["job"].get("accelerate_config"):  # a missing, unreadable or unrunnable file fails now, not at start
        refuse_unrunnable(launch_settings(config["job"].get("num_processes"), config["job"]["accelerate_config"])[1])
    project_id = _project_id(db, project)
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
    if start:
        start_queued(db, max_concurrent)
    return get_run(db, run_id)


# Settings that hold credentials: never stored with a run (its config is a database row, shown in `runs show` and
# the app). The libraries read them from the environment instead: HF_TOKEN (huggingface_hub, for hub_token),
# WANDB_API_KEY, MLFLOW_TRACKING_TOKEN, ...
SECRET_SETTINGS = ("hub_token",)
_SECRET_KEY = re.compile(r"(token|secret|password|passwd|api[_-]?key|credential|auth)", re.IGNORECASE)


def refuse_secrets(settings: dict[str, Any]) -> None:
    """InputError naming any secret among raw run settings: a SECRET_SETTINGS key with a value, or a key that
    looks like a credential (api_key, token, password, ...) anywhere inside a mapping (tracker_kwargs,
    accelerator_kwargs, ...)."""
    found = [key for key in SECRET_SETTINGS if settings.get(key) not in (None, "", "null", "None")]

    def walk(value: Any, path: str) -> None:
        if isinstance(value, str) and value.strip().startswith(("{", "[")):
            try:
                value = json.loads(value)  # --set tracker_kwargs='{"wandb": {"api_key": ...}}' arrives as text
            except ValueError:
                return
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}"
                if _SECRET_KEY.search(str(key)) and item not in (None, ""):
                    found.append(where)
                else:
                    walk(item, where)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")

    for key, value in settings.items():
        if key not in SECRET_SETTINGS:
            walk(value, key)
    if found:
        raise InputError("a secret is never stored with a run: set it in the environment of the server or the "
                         "command instead (HF_TOKEN for the hub, WANDB_API_KEY, ...)", field=", ".join(found))


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads_per_process(num_processes: int = 1) -> int:
    """With N processes on C cores each gets C // N threads (at least one)."""
    return max(1, usable_cores() // max(1, num_processes))


def default_accelerate_config() -> Path | None:
    """The file `accelerate config` writes (accelerate's own lookup: $HF_HOME, else $XDG_CACHE_HOME/huggingface,
    else ~/.cache/huggingface, then accelerate/default_config.yaml), when it exists."""
    home = os.environ.get("HF_HOME", os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"))
    path = Path(os.path.expanduser(home)) / "accelerate" / "default_config.yaml"
    return path if path.is_file() else None


def _read_accelerate_config(config_file: Path) -> dict:
    """An accelerate config file's settings (YAML or JSON; YAML reads both)."""
    import yaml

    try:
        data = yaml.safe_load(Path(config_file).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{config_file}: not a readable accelerate config ({error})") from None
    return data if isinstance(data, dict) else {}


def _config_num_processes(config_file: Path) -> int:
    """num_processes of an accelerate config file; 1 when it has none."""
    value = _read_accelerate_config(config_file).get("num_processes", 1)
    if not isinstance(value, int) or value < 1:
        raise InputError(f"{config_file}: num_processes must be a positive integer, got {value!r}")
    return value


def launch_settings(num_processes: int | None = None, accelerate_config: str | None = None) -> tuple[int, Path | None]:
    """(processes, config file or None) for a run: the run's own settings first, then the server's
    (RLHF_STUDIO_NUM_PROCESSES, RLHF_STUDIO_ACCELERATE_CONFIG), then accelerate's default config file, else one
    process. A config file gives its num_processes unless a number is set explicitly."""
    config = accelerate_config or os.environ.get(ACCELERATE_CONFIG_ENV) or default_accelerate_config()
    if config is not None and not Path(config).is_file():
        raise InputError(f"{config}: accelerate config file not found")
    explicit = num_processes if num_processes is not None else os.environ.get(NUM_PROCESSES_ENV)
    if explicit is not None:
        if not str(explicit).isdigit() or int(explicit) < 1:
            raise InputError(f"num_processes must be a positive integer, got {explicit!r}")
        return int(explicit), (Path(config) if config else None)
    return (_config_num_processes(Path(config)) if config else 1), (Path(config) if config else None)


def refuse_unrunnable(config_file: Path | None) -> None:
    """An accelerate setup that cannot run on this machine, refused when the run is queued or started rather than
    failing in every rank. FSDP without a GPU: accelerate (1.15) turns FSDP on only for GPU-like devices, so on a
    CPU-only machine the ranks either stop at once (with fsdp_sync_module_states: "There are currently no
    available devices found") or quietly run as DDP (tests/rlhf/test_multiprocess.py)."""
    if config_file is None or _read_accelerate_config(config_file).get("distributed_type") != "FSDP":
        return
    import torch

    if not torch.cuda.is_available():
        raise InputError(f"{config_file}: FSDP needs GPUs, and this machine has none (accelerate runs FSDP only on GPU"
                         "-like devices); on CPUs use configs/accelerate/ddp.yaml, or num_processes without a config")


def worker_command(db_path: str, run_id: int, num_processes: int | None = None,
                   accelerate_config: str | None = None, rank_logs: str | Path | None = None) -> list[str]:
    """The exact command a run executes (stored on its row). With several processes and `rank_logs` (a folder),
    each rank's output also goes to its own log there (torch elastic's --tee), which a failed run's error names."""
    worker = ["-m", "labeler.worker", "--db", db_path, "--run-id", str(run_id)]
    if os.environ.get(LAUNCHER_ENV, "accelerate") == "python":
        return [sys.executable, *worker]
    processes, config = launch_settings(num_processes, accelerate_config)
    # labeler.launcher is accelerate launch (its parser and launch_command) that records a dead rank's exit.
    launch = [sys.executable, "-m", "labeler.launcher"]
    # --tee 3: stdout and stderr of every rank to DIR/<id>/attempt_0/<rank>/, and to worker.log with a
    # [default<rank>]: prefix. Without --log_dir torch would make a torchelastic_* folder in /tmp per launch.
    tee = ["--tee", "3", "--log_dir", str(rank_logs)] if processes > 1 and rank_logs is not None else []
    # --num_cpu_threads_per_process matters most: without it accelerate sets OMP_NUM_THREADS=1 in the worker,
    # and torch trained on one core of two (an app PPO step took ~30 s against 8-9 s for the library).
    threads = ["--num_cpu_threads_per_process", str(threads_per_process(processes))]
    settings = _read_accelerate_config(config) if config is not None else {}
    # Two runs of several processes on one machine would both rendezvous on accelerate's default port 29500
    # (the second fails with "address already in use"): a free port each, unless the file names one or the
    # run spans machines (then every machine must use the file's).
    single_machine = int(settings.get("num_machines", 1) or 1) == 1
    port = (["--main_process_port", str(free_port())]
            if processes > 1 and single_machine and not settings.get("main_process_port") else [])
    if config is not None:
        # The user's setup (DDP, DeepSpeed, FSDP, mixed precision, machines) as they wrote it; an explicit
        # number of processes overrides the file's.
        count = ["--num_processes", str(processes)] if processes != _config_num_processes(config) else []
        return [*launch, "--config_file", str(config), *count, *port, *tee, *threads, *worker]
    # Explicit flags: accelerate otherwise warns about every default it had to guess without a config file.
    multi = ["--multi_gpu"] if processes > 1 else []  # DDP; on a CPU-only machine see launch_env
    return [*launch, *multi, "--num_processes", str(processes), "--num_machines", "1", *port, *tee, *threads,
            "--mixed_precision", "no", "--dynamo_backend", "no", *worker]


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_env(command: list[str]) -> dict[str, str]:
    """Environment a launch needs beyond the server's: `--multi_gpu` on a machine without a GPU runs gloo
    ranks on the CPU only with ACCELERATE_USE_CPU=1 (otherwise every process believes it is alone)."""
    gpu_config = ("--config_file" in command and _read_accelerate_config(
        Path(command[command.index("--config_file") + 1])).get("distributed_type") == "MULTI_GPU")
    if "--multi_gpu" not in command and not gpu_config:
        return {}
    import torch

    return {} if torch.cuda.is_available() else {"ACCELERATE_USE_CPU": "1"}


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
            running = db.execute("SELECT COUNT(*) FROM runs WHERE status = 'running'").fetchone()[0]
            if running >= limit:
                break
            row = db.execute("SELECT id FROM runs WHERE status = 'queued' ORDER BY id LIMIT 1").fetchone()
            if row is None:
                break
            run_id = row[0]
            now = utc_now()
            queued = get_run(db, run_id)
            job = (queued.config or {}).get("job", {})
            try:
                if os.environ.get(LAUNCHER_ENV, "accelerate") != "python":  # python: no accelerate setup is read
                    refuse_unrunnable(launch_settings(job.get("num_processes"), job.get("accelerate_config"))[1])
                command = worker_command(db_file(db), run_id, job.get("num_processes"), job.get("accelerate_config"),
                                         rank_logs=Path(queued.output_dir) / RANK_LOGS)
            except InputError as error:  # a missing or broken accelerate config fails this run, not the queue
                db.conn.execute("UPDATE runs SET status = 'failed', error = ?, ended_at = ? WHERE id = ?",
                                [f"could not start the worker: {error}", now, run_id])
                continue
            db.conn.execute(
                "UPDATE runs SET status = 'running', pid = NULL, started_at = COALESCE(started_at, ?),"
                " heartbeat_at = ?, ended_at = NULL, error = '', command = ? WHERE id = ?",
                [now, now, shlex.join(command), run_id],
            )
        try:
            pid = _spawn(get_run(db, run_id), command)
        except OSError as error:
            finish(db, run_id, "failed", f"could not start the worker: {error}")
            continue
        with write_transaction(db):
            db.conn.execute("UPDATE runs SET pid = ? WHERE id = ? AND status = 'running'", [pid, run_id])
        launched.append(run_id)
    return launched


def _spawn(run: Run, command: list[str]) -> int:
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
    env.update(launch_env(command))
    # The project root on the path, so `-m labeler.worker` works from any working directory.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    # start_new_session: the worker and accelerate's child form their own process group, which cancel signals
    # as a whole, and a Ctrl-C in the server's terminal does not reach them.
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               env=env, start_new_session=True, close_fds=True)
    log.close()
    # Reap the child when it exits so it never lingers as a zombie that looks alive to poll().
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


def finish(db, run_id: int, status: str, error: str = "", only_if: str = "running") -> bool:
    with write_transaction(db):
        cursor = db.conn.execute(
            f"UPDATE runs SET status = ?, error = ?, ended_at = ? WHERE id = ? AND status = ?",
            [status, error, utc_now(), run_id, only_if],
        )
        if cursor.rowcount == 1:
            # An ended run waits for no label: its rollouts stop jumping the queue at once (same transaction).
            db.conn.execute("UPDATE items SET priority = 0 WHERE run_id = ? AND priority > 0", [run_id])
    return cursor.rowcount == 1


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
        row = db.execute("SELECT status, error, output_dir, log_path FROM runs WHERE id = ?", [run_id]).fetchone()
        if row is None or row["status"] not in ("running", "failed"):
            return None
        lost_peer = any(marker in (row["error"] or "") for marker in PEER_LOST_MARKERS)
        if failure.rank == 0 and lost_peer and any(other.rank != 0 for other in others):
            failure = min((other for other in others if other.rank != 0), key=lambda other: other.rank)
        if row["status"] == "failed" and failure.rank == 0 and row["error"]:
            return None
        from labeler.services import checkpoints

        who = f"rank {failure.rank}" + (f" (pid {failure.pid})" if failure.pid else "")
        parts = [f"training process {who} {failure.how()}; its log: {failure.log or row['log_path']}"]
        if row["status"] == "failed" and row["error"]:
            before = " ".join(row["error"].split())
            parts.append(f"the other ranks were stopped (rank 0 recorded: {before[:300]})")
        checkpoint = checkpoints.latest_checkpoint(Path(row["output_dir"]) / "checkpoints")
        parts.append(f"`rlhf-studio runs resume {run_id}` continues from {checkpoint}" if checkpoint else
                     f"`rlhf-studio runs resume {run_id}` starts it again (no complete checkpoint yet)")
        message = "; ".join(parts)
        db.conn.execute("UPDATE runs SET status = 'failed', error = ?, ended_at = COALESCE(ended_at, ?) WHERE id = ?",
                        [message, utc_now(), run_id])
    return message


def _is_run_worker(pid: int, run_id: int) -> bool:
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
    Linux): then only the recorded group can be checked (_group_alive)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    database = db_file(db)
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


def poll(db, max_concurrent: int | None = None, now: datetime | None = None) -> list[int]:
    """Mark dead running runs failed (no process of the run left, or no heartbeat for STALE_SECONDS; a silent
    run's processes are stopped), then start queued runs. Returns the ids marked failed.

    Alive means any process of the run (run_processes), not only the recorded pid: that is the launcher, and a
    worker whose launcher was killed goes on training and heartbeating. Marking such a run failed let `runs
    resume` start a second worker on the same folder, and both registered a model."""
    now = now or datetime.now(timezone.utc)
    dead = []
    for run in list_runs(db, status="running", limit=1000):
        heartbeat = _parse_time(run.heartbeat_at) if run.heartbeat_at else None
        silent = heartbeat is None or (now - heartbeat).total_seconds() > STALE_SECONDS
        processes = run_processes(db, run) if run.pid is not None else []
        # Its recorded group (the pid included) or any process named as its worker; only a named one (or, without
        # /proc, the recorded leader) is ever signalled: a silent run's pid may belong to a stranger by now.
        alive = bool(processes) or (run.pid is not None and (pid_alive(run.pid) or _group_alive(run.pid)))
        ours = bool(processes) or (processes is None and alive and _is_run_worker(run.pid, run.id))
        gone = silent if run.pid is None else (not alive or silent)  # pid None: claimed, never launched
        if gone:
            reason = ("the worker process is gone" if not alive else
                      f"no heartbeat for {STALE_SECONDS:.0f} s, the worker was stopped" if ours else "no heartbeat")
            if finish(db, run.id, "failed", f"{reason} (pid {run.pid}); see {run.log_path}"):
                dead.append(run.id)
                if ours:
                    # Alive but silent (stopped, swapping, stuck in C code): marked failed first (its SIGTERM
                    # handler then leaves the status alone), then stopped, so a resume never runs a second
                    # worker on the same folder.
                    _terminate(run, processes, SILENT_STOP_GRACE_SECONDS)
    start_queued(db, max_concurrent)
    return dead


def request_stop(db, run_id: int) -> Run:
    """Early stop: the worker ends after the current step, saves and registers the model (status succeeded)."""
    run = get_run(db, run_id)
    if run.status not in ("queued", "running"):
        raise InputError(f"run {run_id} is {run.status}; only a queued or running run can be stopped", field="run_id")
    with write_transaction(db):
        db.conn.execute("UPDATE runs SET stop_requested = 1 WHERE id = ?", [run_id])
        # A queued run that is asked to stop never starts.
        db.conn.execute("UPDATE runs SET status = 'cancelled', ended_at = ? WHERE id = ? AND status = 'queued'",
                        [utc_now(), run_id])
    return get_run(db, run_id)


def cancel_run(db, run_id: int, grace_seconds: float = 10.0, max_concurrent: int | None = None) -> Run:
    """Cancel: SIGTERM to every process of the run (run_processes), SIGKILL after `grace_seconds`. The model of
    its newest complete checkpoint is registered (kept_models); the checkpoint stays so the run can be resumed.
    A run already failed or cancelled whose processes still live (a launcher killed, its worker not) has them
    stopped and keeps its status."""
    run = get_run(db, run_id)
    processes = run_processes(db, run) if run.pid else []
    if run.finished and not processes:
        raise InputError(f"run {run_id} already {run.status}", field="run_id")
    if not run.finished:
        # Mark first: the worker, seeing SIGTERM, then leaves the status alone.
        finish(db, run_id, "cancelled", "cancelled by user", only_if=run.status)
    from labeler.services import checkpoints

    if run.output_dir and checkpoints.writing(Path(run.output_dir) / "checkpoints"):  # it finishes first
        grace_seconds = max(grace_seconds, checkpoints.WRITE_GRACE_SECONDS)
    if run.pid and (processes or (processes is None and run.status == "running")):
        _terminate(run, processes, grace_seconds)
    if not run.finished:  # nothing trained is thrown away: its newest checkpoint is registered (kept_models)
        from labeler.services.kept_models import keep_after_cancel

        keep_after_cancel(db, run_id)
    start_queued(db, max_concurrent)
    return get_run(db, run_id)


def _terminate(run: Run, processes: list[int] | None, grace_seconds: float) -> None:
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
        return not (group and _group_alive(group)) and not any(pid_alive(pid) for pid in members)

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


def _group_alive(pgid: int) -> bool:
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


def resume_run(db, run_id: int, max_concurrent: int | None = None) -> Run:
    """Queue a failed or cancelled run again; its worker continues from the newest complete checkpoint."""
    run = get_run(db, run_id)
    if run.status not in ("failed", "cancelled"):
        raise InputError(f"run {run_id} is {run.status}; only a failed or cancelled run can be resumed", field="run_id")
    # A run has one worker, ever: a process of the last attempt that still lives (its launcher was killed, not
    # the worker) would train on in the same folder beside the new one, and both would register a model.
    processes = run_processes(db, run) if run.pid else []
    if processes or (processes is None and _group_alive(run.pid)):
        listed = f" (pids {', '.join(map(str, processes))})" if processes else ""
        raise InputError(f"run {run_id} still has processes running{listed}: stop them first with "
                         f"`rlhf-studio runs cancel {run_id}`, then resume", field="run_id")
    with write_transaction(db):
        db.conn.execute(
            "UPDATE runs SET status = 'queued', stop_requested = 0, error = '', ended_at = NULL, pid = NULL WHERE id = ?",
            [run_id],
        )
    start_queued(db, max_concurrent)
    return get_run(db, run_id)


def settled(db, run: Run, interval: float = 0.2) -> Run:
    """A finished run's row once its launcher is done with it: a failed run's launcher may still be stopping
    the other ranks and then records which rank died (record_rank_failure), for up to LAUNCHER_EXIT_SECONDS."""
    deadline = time.monotonic() + LAUNCHER_EXIT_SECONDS
    while run.status == "failed" and run.pid and _is_run_worker(run.pid, run.id) and time.monotonic() < deadline:
        time.sleep(interval)
    return get_run(db, run.id)


def wait(db, run_id: int, timeout: float | None = None, interval: float = 0.5) -> Run:
    """Block until the run ends (polling, so a dead worker is noticed); returns its final row (settled)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        run = get_run(db, run_id)
        if run.finished:
            return settled(db, run)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} still {run.status} after {timeout} s")
        time.sleep(interval)
        poll(db)


# ---- what the Train tab and `runs show` read -----------------------------------------------------

def metrics_frame(db, run_id: int, names: list[str] | None = None):
    """A pandas DataFrame (step, name, value) of the run's metrics, ordered by step, for gr.LinePlot."""
    import pandas as pd

    query = "SELECT step, name, value FROM metrics WHERE run_id = ?"
    params: list[Any] = [int(run_id)]
    if names:
        query += f" AND name IN ({', '.join('?' * len(names))})"
        params += list(names)
    rows = db.execute(query + " ORDER BY name, step", params).fetchall()
    return pd.DataFrame([tuple(row) for row in rows], columns=["step", "name", "value"])


def metric_names(db, run_id: int) -> list[str]:
    return [row[0] for row in db.execute("SELECT DISTINCT name FROM metrics WHERE run_id = ? ORDER BY name", [run_id])]


def samples(db, run_id: int, limit: int = 20) -> list[dict]:
    rows = db.execute(
        "SELECT step, query, response, reward FROM run_samples WHERE run_id = ? ORDER BY step DESC, id LIMIT ?",
        [int(run_id), int(limit)],
    ).fetchall()
    return [dict(row) for row in rows]


def log_tail(run: Run, lines: int = 40) -> str:
    try:
        with open(run.log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64_000))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    # Progress bars rewrite their line with \r and move the cursor with ANSI escapes: keep the last state of
    # each line, without the escapes, and drop a line repeated right after itself.
    cleaned = []
    for line in _ANSI_ESCAPE.sub("", text).rstrip("\n").split("\n"):  # not splitlines(): it splits at \r too
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
        if not cleaned or line != cleaned[-1]:
            cleaned.append(line)
    return "\n".join(cleaned[-lines:])
