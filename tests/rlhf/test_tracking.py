import csv
import json

from rlhf.tracking import CsvSink, JsonlSink, Tracker


def test_csv_widens_its_header_when_a_new_stat_appears(tmp_path):
    sink = CsvSink(tmp_path / "metrics.csv")
    sink.log(1, {"a": 1.0}, [])
    sink.log(2, {"a": 2.0, "b": 3.0}, [])
    with (tmp_path / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"step": "1", "a": "1.0", "b": ""}, {"step": "2", "a": "2.0", "b": "3.0"}]
    # a sink reopened on the same file keeps appending under the existing header
    CsvSink(tmp_path / "metrics.csv").log(3, {"b": 4.0}, [])
    with (tmp_path / "metrics.csv").open(newline="") as f:
        assert list(csv.DictReader(f))[-1] == {"step": "3", "a": "", "b": "4.0"}


def test_jsonl_writes_null_for_non_finite_values(tmp_path):
    JsonlSink(tmp_path / "m.jsonl").log(5, {"x": float("nan"), "y": 1.5}, [])
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"step": 5, "x": None, "y": 1.5}


def test_tracker_fans_out_to_files_tensorboard_and_callback(tmp_path):
    calls = []
    tracker = Tracker.create(tmp_path / "logs", tensorboard=True, callback=lambda *args: calls.append(args))
    tracker.log(1, {"objective/kl": 0.5}, [{"query": "q", "response": "r|x", "reward": 1.0}])
    tracker.close()
    assert calls == [(1, {"objective/kl": 0.5}, [{"query": "q", "response": "r|x", "reward": 1.0}])]
    assert (tmp_path / "logs" / "metrics.csv").read_text().splitlines() == ["step,objective/kl", "1,0.5"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "logs"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("objective/kl")] == [(1, 0.5)]


def test_tracker_without_log_dir_writes_nothing(tmp_path):
    tracker = Tracker.create(None, callback=None)
    tracker.log(1, {"a": 1.0})
    assert tracker.sinks == [] and list(tmp_path.iterdir()) == []
