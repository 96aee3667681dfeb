"""KTO: tune the policy from answers labelled desirable or undesirable (TRL 1.x's KTOTrainer, the app's CPU
defaults in runners/online.py)."""
from __future__ import annotations

from typing import Any

from labeler.services.export import training_options, unpaired_rows
from labeler.services.training_stages.base import Stage


def rows(db, project: str, job, **options) -> list[dict[str, Any]]:
    """Every rated answer: desirable when its mean score is at least sft_min_score (default the scale's midpoint),
    undesirable below it (export --kind unpaired's rows), in the export's order (the runner shuffles them)."""
    listed = unpaired_rows(db, project, training_options(job, threshold=job.sft_min_score, **options))
    return [{"prompt": r["prompt"], "completion": r["completion"], "label": bool(r["label"])} for r in listed]


def label_problem(labels: list[bool]) -> str | None:
    """Why KTO cannot train on rows with these labels (all desirable, or all undesirable), or None."""
    if labels and (all(labels) or not any(labels)):
        return (f"all {len(labels)} rated answers are {'desirable' if labels[0] else 'undesirable'} with this "
                "threshold; KTO needs both (change sft_min_score or rate more)")
    return None


STAGE = Stage(
    name="kto", config_class="labeler.services.runners.online:StudioKTOConfig",
    runner="labeler.services.runners.online:run_kto", rows=rows, unit="answers",
    label="Learn from good/bad labels (KTO)",
    note="Tunes the model from answers labelled good or bad (ratings above or below the scale's midpoint).",
    card="KTO (KTOTrainer, TRL 1.x API)", metrics=("loss", "kl"),
    form_fields=("learning_rate", "per_device_train_batch_size", "beta", "desirable_weight", "undesirable_weight"),
    full_lr=1e-6, lora_lr=5e-6, data_problem=lambda rows: label_problem([row["label"] for row in rows]),
)
