"""labeler/services/execution/metrics_sink.py: what a training process writes to SQLite, row by row."""
import numpy as np
import torch

from labeler.services.execution.metrics_sink import MetricsSink, scalar_stats
from helpers import rows


def new_run(db) -> int:
    return db.execute("INSERT INTO runs (project_id, stage) VALUES (1, 'ppo')").lastrowid


def test_scalar_stats_keeps_finite_scalars_only():
    stats = {"a": 1, "b": 2.5, "t": torch.tensor(0.25), "n": np.float32(0.5), "vec": torch.tensor([1.0, 2.0]),
             "nan": float("nan"), "inf": torch.tensor(float("inf")), "flag": True, "text": "x", "list": [1.0]}
    assert scalar_stats(stats) == {"a": 1.0, "b": 2.5, "t": 0.25, "n": 0.5}


def test_log_samples_progress_truncate_and_final_metrics(db, db_path):
    run_id = new_run(db)
    sink = MetricsSink(db_path, run_id, stop_poll_seconds=0)
    assert sink.log(1, {"loss": 2.0, "kl": torch.tensor(0.25), "skip": "text"}) == 2
    sink.log(2, {"loss": 1.5})
    sink.log(2, {"loss": 1.25})  # a resumed run redoes step 2: replaced, not added
    assert rows(db, "SELECT step, name, value FROM metrics WHERE run_id = ? ORDER BY step, name", [run_id]) == [
        (1, "kl", 0.25), (1, "loss", 2.0), (2, "loss", 1.25)]
    assert sink.final_metrics() == {"kl": 0.25, "loss": 1.25}  # each metric's last logged step
    sink.ppo_callback(2, {"reward": 0.5}, [{"query": "q", "response": "r", "reward": 1}, {"query": "q2"}])
    sink.samples(2, [{"query": "again", "response": "r", "reward": None}])  # a step's samples are replaced
    assert rows(db, "SELECT step, query, response, reward FROM run_samples WHERE run_id = ?", [run_id]) == [
        (2, "again", "r", None)]
    sink.progress(2, total_steps=10)
    step, total, heartbeat = rows(db, "SELECT step, total_steps, heartbeat_at FROM runs WHERE id = ?", [run_id])[0]
    assert (step, total) == (2, 10) and heartbeat.endswith("Z")
    sink.truncate_after(1)
    assert rows(db, "SELECT step, name FROM metrics WHERE run_id = ? ORDER BY step, name", [run_id]) == [
        (1, "kl"), (1, "loss")]
    assert rows(db, "SELECT COUNT(*) FROM run_samples WHERE run_id = ?", [run_id]) == [(0,)]


def test_stop_flag_and_a_non_main_process_writes_nothing(db, db_path):
    run_id = new_run(db)
    reader = MetricsSink(db_path, run_id, stop_poll_seconds=0, writes=False)
    slow = MetricsSink(db_path, run_id, stop_poll_seconds=3600)
    assert reader.stop_requested() is False and slow.stop_requested() is False
    assert reader.log(1, {"loss": 1.0}) == 0
    reader.samples(1, [{"query": "q", "response": "r", "reward": 1.0}])
    reader.progress(1, 5)
    reader.heartbeat()
    assert rows(db, "SELECT COUNT(*) FROM metrics") == [(0,)] and rows(db, "SELECT COUNT(*) FROM run_samples") == [(0,)]
    assert rows(db, "SELECT step, total_steps, heartbeat_at FROM runs WHERE id = ?", [run_id]) == [(0, 0, None)]
    db.execute("UPDATE runs SET stop_requested = 1 WHERE id = ?", [run_id])
    assert reader.stop_requested() is True
    assert slow.stop_requested() is False  # read just now: not read again for an hour (stop_poll_seconds)
