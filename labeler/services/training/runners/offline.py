"""SFT, the reward model and DPO: the rlhf library's Trainers on transformers.Trainer, trained on the project's
rated answers (SFT) or preference pairs (RM, DPO) through common.train_stage."""
from __future__ import annotations

from labeler.services.training.runners.common import conversational, policy_kind, require_rows, stage_rows, train_stage
from labeler.services.training.stages import RunResult, StageContext


def run_sft(ctx: StageContext) -> RunResult:
    from rlhf.sft import SFTConfig, SFTTrainer

    db = ctx.open_db()
    # Well-rated answers (mean score >= threshold, default the scale's midpoint) are the demonstrations.
    rows = stage_rows(ctx, db, "sft", conversational=conversational(ctx, db, "sft"))
    require_rows(rows, "well-rated answers", "rate more answers (SFT trains on answers rated at or above sft_min_score)")
    return train_stage(ctx, db, "sft", rows, SFTTrainer, SFTConfig, "CAUSAL_LM", policy_kind(ctx), "sft")


def _preference_pairs(ctx: StageContext, db, stage: str, **options) -> list[dict]:
    rows = stage_rows(ctx, db, stage, **options)
    require_rows(rows, "preference pairs", "rank answers (or rate two answers per prompt with include_rating_pairs)")
    return rows


def run_rm(ctx: StageContext) -> RunResult:
    from rlhf.reward import RewardConfig, RewardTrainer

    db = ctx.open_db()
    rows = _preference_pairs(ctx, db, "rm")
    return train_stage(ctx, db, "rm", rows, RewardTrainer, RewardConfig, "SEQ_CLS", "reward", "preferences")


def run_dpo(ctx: StageContext) -> RunResult:
    from rlhf.dpo import DPOConfig, DPOTrainer

    db = ctx.open_db()
    rows = _preference_pairs(ctx, db, "dpo", conversational=conversational(ctx, db, "dpo"))
    return train_stage(ctx, db, "dpo", rows, DPOTrainer, DPOConfig, "CAUSAL_LM", policy_kind(ctx), "preferences")
