"""The worker releases what training held before the automatic evaluation loads the tuned model."""
from __future__ import annotations

import gc

from labeling_helpers import add_ranked_pairs, make_users
from transformers import PreTrainedModel

from labeler.services.data import prompts
from labeler.services.evals import evaluation
from labeler.services.execution import run_metrics, runs
from labeler.services.training import jobs


def _live_models() -> set[int]:
    """Every model object Python still tracks, collected or not (no gc.collect: that is what is tested)."""
    return {id(o) for o in gc.get_objects() if isinstance(o, PreTrainedModel)}


def test_no_model_of_the_training_is_alive_when_the_evaluation_starts(db, tmp_path, tiny_model_dir, monkeypatch):
    from labeler.worker import run_worker

    make_users(db, "ann")
    add_ranked_pairs(db, 4, annotator="ann")
    heldout = ["The film was", "I watched it and"]
    prompts.add_prompts(db, heldout)
    db.execute(f"UPDATE prompts SET split = 'test' WHERE text IN ({', '.join('?' * len(heldout))})", heldout)
    left_over = []
    real = evaluation.evaluate_finished_run

    def evaluate_and_count(*args, **kwargs):
        left_over.append(_live_models() - before)
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate_finished_run", evaluate_and_count)
    run = jobs.create_run(db, "dpo", {"model": str(tiny_model_dir), "steps": 1, "per_device_train_batch_size": 2,
                                      "max_length": 64, "include_rating_pairs": "false", "eval_samples": 1,
                                      "max_new_tokens": 3, "checkpoint_every": 0},
                          runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    gc.collect()
    before = _live_models()
    assert run_worker(runs.db_file(db), run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))
    assert left_over == [set()]  # the policy and the DPO reference trained beside it: both gone
