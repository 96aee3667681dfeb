"""A resumed run trains on the data it started with, not on labels that arrived since (issue 10 item 8)."""
from __future__ import annotations

import json
from types import SimpleNamespace

from labeling_helpers import add_ranked_pairs

from labeler.services.data import accounts
from labeler.services.training import jobs
from labeler.services.serving import models
from labeler.services.execution import runs
from labeler.services.training.stages import StageContext
from labeler.services.settings.job_settings import JobConfig
from labeler.worker import run_worker


def _context(tmp_path, writes=True) -> StageContext:
    return StageContext(run_id=1, db_path="unused", stage="rm", project="default", job=JobConfig(), trainer_settings={},
                        output_dir=tmp_path / "run", sink=SimpleNamespace(writes=writes))


def test_the_first_start_stores_the_rows_and_a_resume_reads_them_back(tmp_path, capsys):
    ctx = _context(tmp_path)
    first = [{"prompt": "p", "chosen": "a", "rejected": "b", "margin": 1.5}, {"prompt": [{"role": "user", "content": "q"}],
                                                                             "chosen": "c", "rejected": "d"}]
    assert ctx.frozen_rows("train_rows", first) == first
    assert json.loads((tmp_path / "run" / "train_rows.json").read_text()) == first
    # New labels since: the resume keeps the first rows and says why.
    grown = first + [{"prompt": "new", "chosen": "e", "rejected": "f"}]
    assert ctx.frozen_rows("train_rows", grown) == first
    assert "resuming on the 2 train_rows this run started with; the database now gives 3" in capsys.readouterr().out
    # Unchanged data: nothing to say.
    assert ctx.frozen_rows("train_rows", first) == first
    assert capsys.readouterr().out == ""


def test_a_process_other_than_the_main_one_writes_nothing(tmp_path):
    ctx = _context(tmp_path, writes=False)
    assert ctx.frozen_rows("prompts", ["a", "b"]) == ["a", "b"]
    assert not (tmp_path / "run").exists()


def test_a_resumed_reward_model_run_keeps_its_pairs(db, tmp_path, tiny_encoder_dir):
    accounts.create_user(db, "ann", "a-long-password")

    add_ranked_pairs(db, 6)
    settings = {"model": str(tiny_encoder_dir), "steps": 2, "checkpoint_every": 1, "per_device_train_batch_size": 2,
                "test_size": 0.0}
    run = jobs.create_run(db, "rm", settings, runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded"
    first = models.get_model(db, f"rm-run{run.id}")["data_snapshot"]
    assert first.split(":")[1] == "6"

    # Labels arrive, then the same run is resumed (as `runs resume` does after a crash): same 6 pairs.
    add_ranked_pairs(db, 4, first=6)
    db.execute("DELETE FROM models WHERE run_id = ?", [run.id])
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded"
    assert models.get_model(db, f"rm-run{run.id}")["data_snapshot"] == first
