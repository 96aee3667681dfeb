"""Online DPO: the policy answers each training prompt twice, a judge picks the better answer, and DPO's loss trains
on those fresh pairs (rlhf.online_dpo's OnlineDPOTrainer, the app's CPU defaults in runners/online_dpo.py). The
judge is the trainer setting `judge`: people (human), mix, rm, rm:NAME, vader or module:function (reward_spec's grammar:
a scorer scores each answer alone, the higher wins, equal scores tie; people rank each pair in the Rank tab)."""
from __future__ import annotations

from labeler.services import reward_spec
from labeler.services.training_stages.base import Stage, training_prompts


def judge_spec(text) -> reward_spec.RewardSpec:
    """The `judge` setting parsed: reward_spec's grammar (rm, rm:NAME, human, mix, mix:NAME, vader, module:function)
    or `people` (human's other name); InputError naming the field otherwise."""
    if str(text).strip() == "people":
        return reward_spec.RewardSpec("human")
    return reward_spec.parse(text, field="judge")


def check(job, trainer) -> None:
    """Refuses a judge that cannot be one when the run is queued, not when it starts."""
    judge_spec(trainer.judge)


def rows(db, project: str, job, **options) -> list[dict]:
    """The project's training prompts (held-out prompts are never trained on) as prompt-only rows, in the
    database's order; the runner shuffles them by the job's seed."""
    return [{"prompt": text} for text in training_prompts(db, project, job)]


STAGE = Stage(
    name="online-dpo", config_class="labeler.services.runners.online_dpo:StudioOnlineDPOConfig",
    runner="labeler.services.runners.online_dpo:run_online_dpo", rows=rows, unit="prompts",
    label="Online preferences (online DPO)",
    note="The model answers each prompt twice, a judge (a reward model or a function) picks the better answer, "
         "and it learns from that pair.",
    card="Online DPO (OnlineDPOTrainer, TRL API)", metrics=("rewards/margins", "objective/kl"),
    # Not `judge`: it may name code to import (module:function), which a web login may not (jobs.create_run); the
    # Train tab's runs are judged by the newest reward model, `train online-dpo --set judge=...` picks another.
    form_fields=("learning_rate", "per_device_train_batch_size", "beta", "loss_type"),
    full_lr=5e-7, lora_lr=5e-6, frozen_rows=("prompts", "prompts"), check=check,
    # the job's answer length is its answers' unless the trainer settings set it (stored when the run is resolved)
    from_job={"max_new_tokens": "max_new_tokens"},
)
