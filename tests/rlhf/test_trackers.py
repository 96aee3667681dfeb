"""Every experiment tracker, offline: PPOConfig(log_with=...) through accelerate, and the transformers-based
trainers' report_to= (RewardTrainer here; DPO and SFT share transformers.Trainer's callbacks). A tiny run logs
two steps and each tracker's own files are read back (TensorBoard event files, wandb's offline run file,
MLflow's file store, trackio's local SQLite database).

wandb, mlflow and trackio are the `[tracking]` extra (requirements-tracking.txt); each test skips, naming the
package, where it is not installed. TensorBoard is a core dependency and always runs.
"""
from __future__ import annotations

import glob
import json
import struct
import sys
import time
from pathlib import Path

import pytest
import torch
from test_ppo import SMALL_TOKENIZER, rollouts, small_vocab_model

from rlhf.configs import TRACKER_PACKAGES, PPOConfig
from rlhf.ppo import PPOTrainer

CHECKED = ["objective/kl", "ppo/loss/total", "ppo/policy/policykl", "env/reward_mean"]


def read_tensorboard(root: Path, project: str, step_key: str = "") -> dict[int, dict[str, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(root / "tensorboard"))
    events.Reload()
    logged: dict[int, dict[str, float]] = {}
    for key in events.Tags()["scalars"]:
        for event in events.Scalars(key):
            logged.setdefault(event.step, {})[key] = event.value
    return logged


def read_wandb(root: Path, project: str, step_key: str = "_step") -> dict[int, dict[str, float]]:
    """The history rows of wandb's offline run file by `step_key`, once its service has written the run's last
    record (`exit`): run.finish() returns before wandb-core has flushed the file."""
    [run_file] = glob.glob(str(root / "wandb" / "wandb" / "offline-run-*" / "run-*.wandb"))
    deadline = time.monotonic() + 60
    while True:
        records = wandb_records(Path(run_file))
        if any(record.WhichOneof("record_type") == "exit" for record in records) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    logged: dict[int, dict[str, float]] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            if step_key in row:  # rows of one step (transformers' final summary shares the last step) merge
                logged.setdefault(row[step_key], {}).update(row)
    return logged


def wandb_records(run_file: Path) -> list:
    """The records of a wandb run file. It is LevelDB's log format (wandb's datastore: a 7-byte file header,
    32 KiB blocks, each record a 7-byte header (crc32, length, type) then a chunk, a record split over blocks
    as FIRST/MIDDLE/LAST chunks) holding wandb_internal.proto Records; wandb ships no Python reader for it."""
    from wandb.proto import wandb_internal_pb2

    raw = run_file.read_bytes()
    assert raw[:4] == b":W&B", f"{run_file}: not a wandb run file"
    block, header = 32768, 7
    pos, chunks, records = header, b"", []
    while pos + header <= len(raw):
        left = block - pos % block
        if left < header:  # a block's tail too short for a record header is zero padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos : pos + header])
        pos += header
        chunks += raw[pos : pos + length]
        pos += length
        if kind in (1, 4) and pos <= len(raw):  # FULL or LAST, written whole: the record is complete
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            records.append(record)
            chunks = b""
    return records


def read_mlflow(root: Path, project: str, step_key: str = "") -> dict[int, dict[str, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"file:{root / 'mlruns'}")
    [run] = client.search_runs([client.get_experiment_by_name(project).experiment_id])
    logged: dict[int, dict[str, float]] = {}
    for key in run.data.metrics:
        for metric in client.get_metric_history(run.info.run_id, key):
            logged.setdefault(metric.step, {})[key] = metric.value
    return logged


def read_trackio(root: Path, project: str, step_key: str = "step") -> dict[int, dict[str, float]]:
    from trackio.sqlite_storage import SQLiteStorage

    db = SQLiteStorage.get_project_db_path(project)
    assert root in db.parents, f"trackio wrote {db}, outside {root}: it was imported before TRACKIO_DIR was set"
    [run] = SQLiteStorage.get_runs(project)
    logged: dict[int, dict[str, float]] = {}
    for row in SQLiteStorage.get_logs(project, run=run):
        if step_key in row:
            logged.setdefault(row[step_key], {}).update(row)
    return logged


TRACKERS = ["tensorboard", "wandb", "mlflow", "trackio"]
# Each reader: (folder, project, step_key) -> {step: {metric: value}}; step_key names the step column where the
# tracker keeps its own counter beside the trainer's (wandb, trackio).
READERS = {"tensorboard": read_tensorboard, "wandb": read_wandb, "mlflow": read_mlflow, "trackio": read_trackio}


@pytest.fixture(scope="module")
def trackio_dir(tmp_path_factory):
    """trackio reads TRACKIO_DIR once, at its first import: one folder serves this module's tests, each test
    logging to its own project."""
    folder = tmp_path_factory.mktemp("trackio")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRACKIO_DIR", str(folder))
        yield folder


@pytest.fixture
def offline_trackers(tmp_path, monkeypatch, trackio_dir):
    """Every tracker writes under tmp_path (trackio: trackio_dir) and reaches no server."""
    for name, value in {
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": tmp_path / "wandb",
        "WANDB_CACHE_DIR": tmp_path / "wandb-cache", "WANDB_CONFIG_DIR": tmp_path / "wandb-config",
        "WANDB_DATA_DIR": tmp_path / "wandb-data",
        # MLflow 3 refuses its file store unless asked; a file store is what needs no server or database package.
        "MLFLOW_TRACKING_URI": f"file:{tmp_path / 'mlruns'}", "MLFLOW_ALLOW_FILE_STORE": "true",
        "TENSORBOARD_LOGGING_DIR": tmp_path / "tensorboard",  # transformers' TensorBoardCallback
    }.items():
        monkeypatch.setenv(name, str(value))
    (tmp_path / "wandb").mkdir()
    yield tmp_path
    if "wandb" in sys.modules:  # wandb keeps its settings (WANDB_DIR...) process-wide until torn down
        sys.modules["wandb"].teardown()


def skip_unless_installed(tracker: str) -> None:
    if tracker in TRACKER_PACKAGES:
        pytest.importorskip(tracker, reason=f"{tracker!r} needs {TRACKER_PACKAGES[tracker]}: "
                                            "pip install 'rlhf-studio[tracking]'")


@pytest.mark.parametrize("tracker", TRACKERS)
def test_ppo_logs_every_step_through_the_tracker(tracker, offline_trackers, trackio_dir):
    skip_unless_installed(tracker)
    root = offline_trackers
    config = PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-2, log_with=tracker,
                       tracker_project_name="rlhf-ppo", log_dir=str(root / "tensorboard"))
    trainer = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    logged_stats = []
    for seed in (1, 2):
        queries, responses, scores = rollouts(4, seed=seed)
        stats = trainer.step(queries, responses, scores)
        batch = {"query": [str(q.tolist()) for q in queries], "response": [str(r.tolist()) for r in responses]}
        trainer.log_stats(stats, batch, scores)
        logged_stats.append({**stats, "env/reward_mean": float(torch.stack(scores).mean())})
    trainer.accelerator.end_training()  # wandb and trackio finish writing here (TRL users call it too)

    logged = READERS[tracker](trackio_dir if tracker == "trackio" else root, "rlhf-ppo")
    assert {1, 2} <= set(logged), f"{tracker} logged steps {sorted(logged)}"
    for step, stats in zip((1, 2), logged_stats):
        for key in CHECKED:
            assert logged[step][key] == pytest.approx(stats[key], rel=1e-5, abs=1e-7), (tracker, step, key)
    # the two steps differ, so each row is its own step's numbers
    assert logged[1]["ppo/loss/total"] != logged[2]["ppo/loss/total"]


# transformers' callbacks name the loss "train/loss" (MLflow: "loss") and count steps from 1 (wandb and trackio
# keep their own 0-based counter, so their rows are matched on train/global_step).
REPORT_TO_KEYS = {"tensorboard": ("", "train/loss"), "wandb": ("train/global_step", "train/loss"),
                  "mlflow": ("", "loss"), "trackio": ("train/global_step", "train/loss")}


@pytest.mark.parametrize("tracker", TRACKERS)
def test_reward_trainer_report_to_logs_every_step_through_the_tracker(tracker, offline_trackers, trackio_dir,
                                                                      tiny_encoder_dir, monkeypatch):
    skip_unless_installed(tracker)
    from test_reward import config, toy_pairs

    from rlhf.reward import RewardTrainer

    root = offline_trackers
    # MLflow's experiment comes from the environment in transformers' MLflowCallback; the others' from `project`
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "rlhf-rm")
    args = config(root, max_steps=2, report_to=[tracker], project="rlhf-rm", run_name="rm")
    trainer = RewardTrainer(str(tiny_encoder_dir), args=args, train_dataset=toy_pairs(16, seed=0))
    trainer.train()
    if tracker == "wandb":  # transformers leaves the wandb run open after train() (more may be logged); close it
        import wandb

        wandb.finish()
    losses = {row["step"]: row["loss"] for row in trainer.state.log_history if "loss" in row}
    assert sorted(losses) == [1, 2]

    step_key, loss_key = REPORT_TO_KEYS[tracker]
    logged = READERS[tracker](trackio_dir if tracker == "trackio" else root, "rlhf-rm", step_key)
    assert {1, 2} <= set(logged), f"{tracker} logged steps {sorted(logged)}"
    for step, loss in losses.items():
        assert logged[step][loss_key] == pytest.approx(loss, rel=1e-5), (tracker, step)
