"""How a run's worker is launched: `accelerate launch` (labeler.launcher) with the run's or the server's accelerate
config and number of processes, the threads each process gets, and the environment the launch needs.

No database here: `jobs.start_queued` asks for the command (`worker_command`) and stores it on the run's row.
`RLHF_STUDIO_LAUNCHER=python` runs the worker as a plain process, without accelerate.
"""
from __future__ import annotations

import importlib.machinery
import os
import socket
import sys
from pathlib import Path
from typing import Callable

import yaml

from labeler.errors import InputError

LAUNCHER_ENV = "RLHF_STUDIO_LAUNCHER"  # "accelerate" (default) or "python" (no accelerate wrapper)
ACCELERATE_CONFIG_ENV = "RLHF_STUDIO_ACCELERATE_CONFIG"  # the server-wide accelerate config file (YAML)
NUM_PROCESSES_ENV = "RLHF_STUDIO_NUM_PROCESSES"  # the server-wide number of training processes
RANK_LOGS = "ranks"  # in a run's folder: each rank's own stdout.log / stderr.log when it has several processes


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


def read_accelerate_config(config_file: Path) -> dict:
    """An accelerate config file's settings (YAML or JSON; YAML reads both)."""
    try:
        data = yaml.safe_load(Path(config_file).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{config_file}: not a readable accelerate config ({error})") from None
    return data if isinstance(data, dict) else {}


def config_num_processes(config_file: Path) -> int:
    """num_processes of an accelerate config file; 1 when it has none."""
    value = read_accelerate_config(config_file).get("num_processes", 1)
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
    return (config_num_processes(Path(config)) if config else 1), (Path(config) if config else None)


def refuse_unrunnable(config_file: Path | None) -> None:
    """An accelerate setup that cannot run on this machine, refused when the run is queued or started rather than
    failing in every rank. FSDP without a GPU: accelerate (1.15) turns FSDP on only for GPU-like devices, so on a
    CPU-only machine the ranks either stop at once (with fsdp_sync_module_states: "There are currently no
    available devices found") or quietly run as DDP (tests/rlhf/test_multiprocess.py)."""
    if config_file is None or read_accelerate_config(config_file).get("distributed_type") != "FSDP":
        return
    import torch

    if not torch.cuda.is_available():
        raise InputError(f"{config_file}: FSDP needs GPUs, and this machine has none (accelerate runs FSDP only on GPU"
                         "-like devices); on CPUs use configs/accelerate/ddp.yaml, or num_processes without a config")


SHORT_MODEL_NAMES = ("", "default", "default-encoder")  # the embedded models, always there


def refuse_unloadable(job: dict, resolve_model: Callable[[str], str]) -> None:
    """What the worker would fail to load, refused when the run is queued (a run with model=/nonexistent/model or
    reward_function=nosuchmodule:fn was accepted and failed in the worker, 5 minutes later on a busy machine):
    the base model through `resolve_model` (the registry's resolver: a registry name, a folder with weights or a
    hub id; unless a `runner` of one's own reads it), and module:function code (reward_function, runner) whose module
    the worker cannot find. The worker runs `python -m` in this process's folder with its environment, so its path is
    that folder, $PYTHONPATH and this process's sys.path. The module is looked up, never imported here."""
    model = str(job.get("model") or "").strip()
    if model not in SHORT_MODEL_NAMES and not job.get("runner"):  # a runner of one's own reads `model` its own way
        resolve_model(model)
    for key in ("reward_function", "runner"):
        spec = str(job.get(key) or "")
        if ":" not in spec:
            continue
        top = spec.partition(":")[0].strip().split(".")[0]
        path = [os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep), *sys.path]
        if not top or importlib.machinery.PathFinder.find_spec(top, [p for p in path if p]) is None and \
                top not in sys.builtin_module_names:
            raise InputError(f"{spec!r}: no module {top!r} in this folder or on the Python path (PYTHONPATH) the "
                             "training worker will have", field=key)


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
    settings = read_accelerate_config(config) if config is not None else {}
    # Two runs of several processes on one machine would both rendezvous on accelerate's default port 29500
    # (the second fails with "address already in use"): a free port each, unless the file names one or the
    # run spans machines (then every machine must use the file's).
    single_machine = int(settings.get("num_machines", 1) or 1) == 1
    port = (["--main_process_port", str(free_port())]
            if processes > 1 and single_machine and not settings.get("main_process_port") else [])
    if config is not None:
        # The user's setup (DDP, DeepSpeed, FSDP, mixed precision, machines) as they wrote it; an explicit
        # number of processes overrides the file's.
        count = ["--num_processes", str(processes)] if processes != config_num_processes(config) else []
        return [*launch, "--config_file", str(config), *count, *port, *tee, *threads, *worker]
    # Explicit flags: accelerate otherwise warns about every default it had to guess without a config file.
    multi = ["--multi_gpu"] if processes > 1 else []  # DDP; on a CPU-only machine see launch_env
    return [*launch, *multi, "--num_processes", str(processes), "--num_machines", "1", *port, *tee, *threads,
            "--mixed_precision", "no", "--dynamo_backend", "no", *worker]


def free_port() -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_env(command: list[str]) -> dict[str, str]:
    """Environment a launch needs beyond the server's: `--multi_gpu` on a machine without a GPU runs gloo
    ranks on the CPU only with ACCELERATE_USE_CPU=1 (otherwise every process believes it is alone)."""
    gpu_config = ("--config_file" in command and read_accelerate_config(
        Path(command[command.index("--config_file") + 1])).get("distributed_type") == "MULTI_GPU")
    if "--multi_gpu" not in command and not gpu_config:
        return {}
    import torch

    return {} if torch.cuda.is_available() else {"ACCELERATE_USE_CPU": "1"}

