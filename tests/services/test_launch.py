"""worker_command: the run's accelerate launch follows the user's accelerate setup when there is one."""
import pytest

from labeler.services.training import jobs
from labeler.services.execution import launch, run_metrics, runs
from labeler.errors import InputError


@pytest.fixture(autouse=True)
def no_user_setup(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no accelerate default config
    for name in (launch.ACCELERATE_CONFIG_ENV, launch.NUM_PROCESSES_ENV, launch.LAUNCHER_ENV):
        monkeypatch.delenv(name, raising=False)


def flag(command: list[str], name: str):
    return command[command.index(name) + 1] if name in command else None


def test_without_a_config_one_process_with_every_core():
    command = launch.worker_command("s.db", 7)
    assert flag(command, "--num_processes") == "1" and flag(command, "--mixed_precision") == "no"
    assert flag(command, "--num_cpu_threads_per_process") == str(launch.usable_cores())
    assert "--multi_gpu" not in command and "--config_file" not in command
    assert command[-5:] == ["labeler.worker", "--db", "s.db", "--run-id", "7"]
    assert launch.launch_env(command) == {}


def test_the_users_default_accelerate_config_is_used_as_written(tmp_path, monkeypatch):
    default = tmp_path / "hf" / "accelerate" / "default_config.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: bf16\n")
    command = launch.worker_command("s.db", 7)
    assert flag(command, "--config_file") == str(default)
    # Its mixed precision and process count are the file's: no flag overrides them.
    assert "--mixed_precision" not in command and "--num_processes" not in command
    assert flag(command, "--num_cpu_threads_per_process") == str(max(1, launch.usable_cores() // 2))


def test_server_and_run_settings_override_the_default(tmp_path, monkeypatch):
    server = tmp_path / "fsdp.yaml"
    server.write_text("distributed_type: FSDP\nnum_processes: 4\n")
    monkeypatch.setenv(launch.ACCELERATE_CONFIG_ENV, str(server))
    command = launch.worker_command("s.db", 1)
    assert flag(command, "--config_file") == str(server) and "--num_processes" not in command
    assert flag(command, "--num_cpu_threads_per_process") == str(max(1, launch.usable_cores() // 4))
    # A run's own number of processes wins over the file's, and is passed on.
    command = launch.worker_command("s.db", 1, num_processes=2)
    assert flag(command, "--num_processes") == "2"
    assert flag(command, "--num_cpu_threads_per_process") == str(max(1, launch.usable_cores() // 2))


def test_processes_without_a_config_are_ddp_and_gloo_on_a_cpu(monkeypatch):
    monkeypatch.setenv(launch.NUM_PROCESSES_ENV, "2")
    command = launch.worker_command("s.db", 1)
    assert "--multi_gpu" in command and flag(command, "--num_processes") == "2"
    assert flag(command, "--num_cpu_threads_per_process") == str(max(1, launch.usable_cores() // 2))
    import torch

    expected = {} if torch.cuda.is_available() else {"ACCELERATE_USE_CPU": "1"}
    assert launch.launch_env(command) == expected


def test_bad_settings_name_the_file_or_value(tmp_path):
    with pytest.raises(InputError, match="missing.yaml: accelerate config file not found"):
        launch.worker_command("s.db", 1, accelerate_config=str(tmp_path / "missing.yaml"))
    with pytest.raises(InputError, match="num_processes must be a positive integer, got 0"):
        launch.worker_command("s.db", 1, num_processes=0)
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_processes: two\n")
    with pytest.raises(InputError, match="bad.yaml: num_processes must be a positive integer"):
        launch.worker_command("s.db", 1, accelerate_config=str(bad))


def test_a_two_process_run_writes_its_row_and_metrics_once(db, tmp_path, monkeypatch):
    # The toy stage (tests/services/toy_runner.py) trains on both ranks; only rank 0 writes to SQLite.
    from pathlib import Path

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))
    monkeypatch.setenv(launch.NUM_PROCESSES_ENV, "2")
    run = jobs.create_run(db, "sft", {"runner": "toy_runner:run", "model": "toy-linear", "steps": 4},
                          runs_dir=tmp_path / "runs")
    assert "--num_processes 2" in run.command and "--multi_gpu" in run.command
    done = jobs.wait(db, run.id, timeout=120)
    assert done.status == "succeeded", run_metrics.log_tail(done)
    assert (done.step, done.total_steps) == (4, 4)
    rows = db.execute("SELECT step, COUNT(*) FROM metrics WHERE run_id = ? AND name = 'loss' GROUP BY step",
                      [run.id]).fetchall()
    assert [tuple(r) for r in rows] == [(1, 1), (2, 1), (3, 1), (4, 1)]
    assert db.execute("SELECT COUNT(*) FROM models WHERE run_id = ?", [run.id]).fetchone()[0] == 1


def test_run_settings_are_stored_refused_from_the_web_and_checked_when_queued(db, tmp_path):
    from labeler.services.data import accounts
    from labeler.ui.tabs.train.form import form_specs

    accounts.create_user(db, "boss", "a-long-password", role="admin")
    assert "num_processes" in [spec.name for spec in form_specs()["job"]]  # the Train tab's form offers it
    run = jobs.create_run(db, "rm", {"num_processes": "2"}, username="boss", runs_dir=tmp_path, start=False,
                          from_web=True)
    assert run.config["job"]["num_processes"] == 2
    config = tmp_path / "ddp.yaml"
    config.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\n")
    with pytest.raises(InputError, match="command line"):  # a file on the server: CLI only
        jobs.create_run(db, "rm", {"accelerate_config": str(config)}, username="boss", runs_dir=tmp_path,
                        start=False, from_web=True)
    assert jobs.create_run(db, "rm", {"accelerate_config": str(config)}, username="boss", runs_dir=tmp_path,
                           start=False).config["job"]["accelerate_config"] == str(config)
    with pytest.raises(InputError, match="accelerate config file not found"):
        jobs.create_run(db, "rm", {"accelerate_config": str(tmp_path / "gone.yaml")}, username="boss",
                        runs_dir=tmp_path, start=False)
    with pytest.raises(InputError, match="reward=human needs one process"):
        jobs.create_run(db, "ppo", {"num_processes": "2", "reward": "human"}, username="boss", runs_dir=tmp_path,
                        start=False)
    assert len(runs.list_runs(db)) == 2


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a machine without a GPU")
def test_fsdp_without_a_gpu_is_refused_when_queued_or_started(db, tmp_path, monkeypatch):
    # accelerate runs FSDP only on GPU-like devices (tests/rlhf/test_multiprocess.py shows what it does instead).
    from pathlib import Path

    fsdp = Path(__file__).resolve().parents[2] / "configs" / "accelerate" / "fsdp.yaml"
    with pytest.raises(InputError, match=r"fsdp.yaml: FSDP needs GPUs, and this machine has none .*ddp.yaml"):
        jobs.create_run(db, "rm", {"accelerate_config": str(fsdp)}, runs_dir=tmp_path)
    assert runs.list_runs(db) == []
    # The server's default setup is only read when a run starts: that run fails, saying why, and nothing runs.
    monkeypatch.setenv(launch.ACCELERATE_CONFIG_ENV, str(fsdp))
    run = jobs.create_run(db, "rm", {}, runs_dir=tmp_path)
    assert (run.status, run.pid) == ("failed", None)
    assert run.error.startswith(f"could not start the worker: {fsdp}: FSDP needs GPUs"), run.error
    # DDP on the same machine is fine (gloo ranks on the CPU).
    ddp = fsdp.parent / "ddp.yaml"
    assert jobs.create_run(db, "rm", {"accelerate_config": str(ddp)}, runs_dir=tmp_path, start=False).status == "queued"
