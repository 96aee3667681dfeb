"""The runs table's one reader and writer (labeler/services/execution/runs.py): rows as Run values, the folder a run
wrote, the early-stop flag, and the writes `jobs` and `supervision` make, checked on whole rows."""
from __future__ import annotations

from pathlib import Path

import pytest

from labeler.services.execution import runs
from labeler.errors import InputError, PermissionDenied
from storage import write_transaction


def row(db, run_id: int) -> dict:
    fields = "status, error, stop_requested, pid, command, ended_at IS NOT NULL AS ended"
    return dict(db.execute(f"SELECT {fields} FROM runs WHERE id = ?", [run_id]).fetchone())


def test_insert_run_queues_a_row_with_its_own_folder_and_log(db, tmp_path):
    run_id = runs.insert_run(db, "sft", {"job": {"steps": 3}}, "default", None, "", tmp_path / "runs")
    run = runs.get_run(db, run_id)
    assert (run.stage, run.name, run.status, run.project, run.config) == (
        "sft", f"sft-run{run_id}", "queued", "default", {"job": {"steps": 3}})
    folder = Path(run.output_dir)
    assert folder.parent == (tmp_path / "runs").resolve() and folder.name.startswith(f"run-{run_id}-")
    assert run.log_path == str(folder / "worker.log")
    assert runs.find_run(db, run_id + 1) is None
    with pytest.raises(InputError, match=f"no run with id {run_id + 1}"):
        runs.get_run(db, run_id + 1)
    with pytest.raises(InputError, match="unknown project 'nowhere'"):
        runs.insert_run(db, "sft", {}, "nowhere", None, "", tmp_path)
    with pytest.raises(PermissionDenied, match="unknown user 'ghost'"):
        runs.insert_run(db, "sft", {}, "default", "ghost", "", tmp_path)
    assert [r.id for r in runs.list_runs(db)] == [run_id]  # the refused inserts wrote nothing


def test_run_of_folder_is_the_newest_run_whose_folder_holds_it(db, tmp_path):
    first = runs.get_run(db, runs.insert_run(db, "sft", {}, "default", None, "", tmp_path))
    second = runs.get_run(db, runs.insert_run(db, "ppo", {}, "default", None, "", tmp_path))
    assert runs.run_of_folder(db, Path(second.output_dir) / "checkpoints" / "checkpoint-4").id == second.id
    assert runs.run_of_folder(db, Path(first.output_dir) / "final").id == first.id
    assert runs.run_of_folder(db, tmp_path / "elsewhere") is None


def test_the_lifecycle_writes(db, tmp_path):
    run_id = runs.insert_run(db, "sft", {}, "default", None, "", tmp_path)
    assert (runs.count_running(db), runs.oldest_queued(db)) == (0, run_id)
    with write_transaction(db):  # mark_started writes inside the caller's transaction (start_queued's claim)
        runs.mark_started(db, run_id, "python -m labeler.worker", runs.utc_now())
    runs.set_pid(db, run_id, 4321)
    assert row(db, run_id) == {"status": "running", "error": "", "stop_requested": 0, "pid": 4321,
                               "command": "python -m labeler.worker", "ended": 0}
    assert (runs.count_running(db), runs.oldest_queued(db)) == (1, None)
    runs.record_progress(db, run_id, step=2, total_steps=8)
    assert (runs.get_run(db, run_id).step, runs.get_run(db, run_id).total_steps) == (2, 8)

    assert runs.stop_requested(db, run_id) is False and runs.stop_requested(db, run_id + 1) is False
    runs.mark_stop_requested(db, run_id)
    assert runs.stop_requested(db, run_id) is True and row(db, run_id)["status"] == "running"  # it ends itself

    assert runs.finish(db, run_id, "failed", "boom") is True
    assert runs.finish(db, run_id, "succeeded") is False  # only a running row ends
    runs.append_error(db, run_id, "; and more")
    assert row(db, run_id) == {"status": "failed", "error": "boom; and more", "stop_requested": 1, "pid": 4321,
                               "command": "python -m labeler.worker", "ended": 1}
    runs.requeue(db, run_id)
    assert row(db, run_id) == {"status": "queued", "error": "", "stop_requested": 0, "pid": None,
                               "command": "python -m labeler.worker", "ended": 0}
    runs.mark_stop_requested(db, run_id)  # a queued run asked to stop never starts
    assert row(db, run_id)["status"] == "cancelled" and row(db, run_id)["ended"] == 1
