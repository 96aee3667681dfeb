"""KTO's rows are frozen once per start, and a resumed KTO run trains on the rows (and so the balanced weights) it
started with (labeler/services/training/runners/online.py run_kto)."""
from __future__ import annotations

from labeling_helpers import add_ranked_pairs

from labeler.services.data import accounts
from labeler.services.training import jobs
from labeler.services.serving import models
from labeler.services.execution import run_metrics, runs
from labeler.services.training.stages import StageContext
from labeler.worker import run_worker

KTO = {"steps": 1, "per_device_train_batch_size": 4, "max_length": 64, "checkpoint_every": 0, "eval_samples": 0,
       "test_size": 0.0}


def _start(db, run_id: int) -> runs.Run:
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run_id])
    status = run_worker(runs.db_file(db), run_id)
    done = runs.get_run(db, run_id)
    assert status == "succeeded", (done.error, run_metrics.log_tail(done))
    return done


def test_a_resumed_kto_run_keeps_its_rows_and_freezes_them_once_per_start(db, tmp_path, tiny_model_dir, monkeypatch,
                                                                        capsys):
    accounts.create_user(db, "ann", "a-long-password")
    add_ranked_pairs(db, 3, rate=True)  # 3 prompts: a good answer rated 7, a bad one 2 -> 6 rows, 3 and 3
    frozen = []
    freeze = StageContext.frozen_rows

    def counted(self, name, rows):
        frozen.append((name, len(rows)))
        return freeze(self, name, rows)

    monkeypatch.setattr(StageContext, "frozen_rows", counted)  # the worker runs in this process
    run = jobs.create_run(db, "kto", {"model": str(tiny_model_dir), **KTO}, runs_dir=tmp_path / "runs", start=False)
    _start(db, run.id)
    first = models.get_model(db, f"kto-run{run.id}")["data_snapshot"]
    assert first.split(":")[:2] == ["unpaired", "6"] and frozen == [("train_rows", 6)]
    assert "KTO weights balanced to the rows: both 1" in capsys.readouterr().out  # 3 desirable, 3 undesirable

    # Labels arrive (2 more prompts: 10 rows), then the same run is resumed, as `runs resume` does after a crash.
    add_ranked_pairs(db, 2, first=3, rate=True)
    db.execute("DELETE FROM models WHERE run_id = ?", [run.id])
    frozen.clear()
    _start(db, run.id)
    assert models.get_model(db, f"kto-run{run.id}")["data_snapshot"] == first
    assert frozen == [("train_rows", 10)]  # once: the database's 10 rows given, the saved 6 trained on
    assert "resuming on the 6 train_rows this run started with; the database now gives 10" in capsys.readouterr().out


def test_grpo_and_rloo_take_every_cpu_default_from_one_place():
    import dataclasses

    from labeler.services.training.runners.online import StudioGRPOConfig, StudioOnlineDefaults, StudioRLOOConfig

    grpo, rloo = (cls(output_dir="unused", report_to="none") for cls in (StudioGRPOConfig, StudioRLOOConfig))
    shared = {f.name: f.default for f in dataclasses.fields(StudioOnlineDefaults)}
    assert {name: getattr(grpo, name) for name in shared} == {name: getattr(rloo, name) for name in shared} == shared
    assert shared["learning_rate"] == 3e-5 and (grpo.beta, rloo.beta) == (0.05, 0.03)  # beta: each its own
    # Neither config repeats a shared field: each declares beta only, the rest comes from the bases.
    for cls in (StudioGRPOConfig, StudioRLOOConfig):
        assert [name for name in cls.__annotations__] == ["beta"], cls.__name__
