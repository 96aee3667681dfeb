"""The TRL 1.x stages: GRPO and RLOO (online: the policy samples groups of answers to the project's prompts and
learns from their rewards) and KTO (offline, on the project's rated answers as desirable / undesirable rows).

GRPO and RLOO take their rewards from the job's reward source, the same as PPO's (common.reward_source:
a function, a reward model, people rating or ranking each prompt's group of answers in the app, or a mix),
wrapped as a TRL reward function. Like the other stages they report through the MetricsSink, checkpoint every
`checkpoint_every` steps through transformers' Trainer and resume from the newest complete checkpoint.

The app's configs (the library's, TRL 1.16's fields and names, with defaults for a run on a CPU) are facts of their
stages: training_stages/grpo.py, rloo.py and kto.py (StudioGRPOConfig, ...), reached through
train_configs.stage_config_class. `steps` counts generation batches, as it counts PPO batches for ppo.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

from labeler.services.serving import models
from labeler.services.training import train_configs
from labeler.services.settings import training_stages
from labeler.errors import InputError
from labeler.services.data.projects import get_project
from labeler.services.training.runners.common import (conversational, human_queue, peft_config, policy_kind,
                                                      policy_prompts, require_rows, reward_source, stage_rows,
                                                      train_stage, train_with_trainer, trainer_callbacks)
from labeler.services.training.stages import RunResult, StageContext, data_snapshot
from labeler.services.settings.training_stages.base import StudioOnlineDefaults  # noqa: F401 - callers import it here
from rlhf.grpo import GRPOTrainer
from rlhf.kto import KTOTrainer
from rlhf.loading import load_tokenizer, save_in_stored_dtype
from rlhf.rloo import RLOOTrainer

# The app's trainer configs, declared with their stages; named here too for callers of this module and for the
# checkpoints' training_args.bin pickled before they moved.
StudioGRPOConfig, StudioRLOOConfig, StudioKTOConfig = map(train_configs.stage_config_class, ("grpo", "rloo", "kto"))


# ---- GRPO and RLOO --------------------------------------------------------------------------------------
def app_reward_function(source, name: str):
    """The job's reward source (queries, responses) -> rewards as a TRL reward function. Prompts reach it as the
    prompt texts (the `prompt_text` column), answers as text; the source's own statistics are logged."""
    def reward(prompts, completions, prompt_text, log_metric=None, **kwargs):
        answers = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        scores = source(list(prompt_text), answers)
        if log_metric is not None:
            for key, value in (getattr(source, "last_stats", None) or {}).items():
                log_metric(key, value)
        return scores

    reward.__name__ = name
    return reward


def _online_args(ctx: StageContext, stage: str):
    """The trainer config: the stored settings (the job's answers per prompt and answer length included, stored
    when the run was resolved) and `steps` generation batches (train_configs.trainer_config)."""
    return train_configs.trainer_config(stage, ctx.job, ctx.trainer_settings, output_dir=str(ctx.checkpoint_root))


def _online_rows(ctx: StageContext, db, stage: str, tokenizer) -> list[dict]:
    """The project's training prompts (shuffled by the job's seed; a resumed run keeps its list), as TRL rows:
    conversational when the project sends prompts through the chat template, plain text otherwise."""
    prompts = ctx.frozen_rows("prompts", policy_prompts(ctx, db, stage))
    if not prompts:
        raise InputError("the project has no prompts: import some first", field="data")
    chat = get_project(db, ctx.project).chat_template is not False and getattr(tokenizer, "chat_template", None) is not None
    return [{"prompt": [{"role": "user", "content": text}] if chat else text, "prompt_text": text} for text in prompts]


def _run_online(ctx: StageContext, stage: str, trainer_cls) -> RunResult:
    from datasets import Dataset

    from rlhf.peft_utils import is_peft_model, merged_model

    job = ctx.job
    db = ctx.open_db()
    base = job.base_model(stage)
    path = models.resolve(db, base)
    tokenizer = load_tokenizer(path, padding_side="left")
    rows = _online_rows(ctx, db, stage, tokenizer)
    args = _online_args(ctx, stage)
    queue = human_queue(ctx)
    reward = app_reward_function(reward_source(ctx, db, queue), job.reward)
    trainer = trainer_cls(path, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, peft_config=peft_config(ctx, "CAUSAL_LM"),
                          callbacks=trainer_callbacks(ctx))
    try:
        train_with_trainer(ctx, trainer)
    finally:
        if queue is not None and hasattr(queue, "release_ahead"):
            queue.release_ahead()
    # A full model any from_pretrained loads (a LoRA adapter merged into its base), as PPO saves its policy.
    trainer.accelerator.wait_for_everyone()
    if trainer.accelerator.is_main_process:
        policy = trainer.accelerator.unwrap_model(trainer.model)
        if is_peft_model(policy):
            policy = merged_model(policy)  # a QLoRA adapter goes into the unquantised base
        save_in_stored_dtype(policy, ctx.final_dir, path)
        tokenizer.save_pretrained(ctx.final_dir)
    return RunResult(str(ctx.final_dir), "policy", base, {}, data_snapshot("prompts", [r["prompt_text"] for r in rows]))


def run_grpo(ctx: StageContext) -> RunResult:
    return _run_online(ctx, "grpo", GRPOTrainer)


def run_rloo(ctx: StageContext) -> RunResult:
    return _run_online(ctx, "rloo", RLOOTrainer)


# ---- KTO -------------------------------------------------------------------------------------------------
def kto_balanced_weights(labels: list[bool]) -> dict[str, float]:
    """The weight that makes the rarer kind of answer count as much as the other: TRL's KTO guidance keeps
    desirable_weight * n_desirable / (undesirable_weight * n_undesirable) within [1, 4/3]. Ratings are rarely
    balanced (on the shipped task, 64 of 432 answers rated 6 or 7), and with weights 1 and 1 the undesirable
    answers' push dominates the loss."""
    desirable = sum(labels)
    undesirable = len(labels) - desirable
    if 0 < desirable < undesirable:
        return {"desirable_weight": undesirable / desirable}
    if 0 < undesirable < desirable:
        return {"undesirable_weight": desirable / undesirable}
    return {}


def run_kto(ctx: StageContext) -> RunResult:
    """KTO on the project's rated answers: mean score >= threshold (sft_min_score, default the scale's midpoint)
    is desirable, below it undesirable (export --kind unpaired's rows). Rows are shuffled by the job's seed: KTO
    reads its batches in order (its KL pairs are made within them), and the export lists a prompt's answers
    together."""
    db = ctx.open_db()
    rows: list[dict[str, Any]] = stage_rows(ctx, db, "kto", conversational=conversational(ctx, db, "kto"))
    random.Random(ctx.job.seed).shuffle(rows)
    require_rows(rows, "rated answers", "rate answers (KTO trains on each rated answer, desirable "
                 "when its mean score is at least sft_min_score)")
    problem = training_stages.get("kto").data_problem(rows)  # labels all one way
    if problem:
        raise InputError(problem, field="sft_min_score")
    rows = ctx.frozen_rows("train_rows", rows)  # a resumed run keeps its rows, and so its weights
    if not {"desirable_weight", "undesirable_weight"} & set(ctx.trainer_settings):  # unless the user weighed them
        weights = kto_balanced_weights([r["label"] for r in rows])
        print(f"KTO weights balanced to the rows: {weights or 'both 1'}", flush=True)
        ctx = dataclasses.replace(ctx, trainer_settings={**ctx.trainer_settings, **weights})
    return train_stage(ctx, db, "kto", rows, KTOTrainer, StudioKTOConfig, "CAUSAL_LM", policy_kind(ctx), "unpaired",
                       frozen=True)


RUNNERS = {"grpo": run_grpo, "rloo": run_rloo, "kto": run_kto}
