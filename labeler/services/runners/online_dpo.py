"""Online DPO in the app (rlhf.online_dpo.OnlineDPOTrainer): each step the policy answers a batch of the project's
training prompts twice, the run's judge picks the better answer of each pair, and DPO's loss trains on the pairs.

The judge is the trainer setting `judge`, in reward_spec's grammar: `rm` (the newest registered reward model),
`rm:NAME`, `vader`, `vader-with-prompt` or `module:function` (a function (prompts, answers) -> one float per
answer). Each answer is scored alone and the higher score wins; equal scores tie and the pair is left out. A
function that raises or returns the wrong number of scores stops the run with a JudgeError naming the function and
the step. People as the judge (the Rank tab's blind pairs) are not wired in yet: judge=human or mix is refused.

Loads torch when imported (it subclasses the library's config): the stage registry names it as a string and
Stage.run imports it, so the app's import stays light (tests/test_light_imports.py, HEAVY_SERVICES).
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from labeler.services import models
from labeler.services.errors import InputError
from labeler.services.projects import get_project
from labeler.services.runners.common import (peft_config, stage_rows, train_with_trainer, trainer_args,
                                             trainer_callbacks)
from labeler.services.stages import RunResult, StageContext, data_snapshot
from labeler.services.training_stages.online_dpo import judge_spec
from rlhf.judges import ScoreJudge
from rlhf.loading import load_tokenizer
from rlhf.online_dpo import OnlineDPOConfig, OnlineDPOTrainer
from rlhf.rewards import FunctionReward


@dataclass
class StudioOnlineDPOConfig(OnlineDPOConfig):
    """OnlineDPOConfig with defaults for a CPU run in the app (the fields and their meaning are TRL's)."""

    judge: str | None = field(default="rm", metadata={
        "help": "Who picks the better answer: rm (the newest reward model), rm:NAME, vader, vader-with-prompt or "
                "module:function (a function (prompts, answers) -> one score per answer); the higher score wins."})
    learning_rate: float = field(default=5e-6, metadata={
        "help": "AdamW learning rate (TRL's 5e-7 suits long GPU runs; a 40-step CPU run needs more)."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Prompts per step (two answers each)."})
    max_new_tokens: int = field(default=16, metadata={"help": "Tokens per answer (the job's max_new_tokens wins when set)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})

    @staticmethod
    def job_settings(job, explicit: dict[str, Any]) -> dict[str, Any]:
        """The job's answer length as max_new_tokens, unless the trainer settings `explicit` set it."""
        return {"max_new_tokens": job.max_new_tokens, **explicit}


class AppJudge(ScoreJudge):
    """A reward source of the app (queries, responses) -> scores as a scoring judge: conversational prompts reach it as
    their text, answers as text."""

    def __init__(self, source, name: str):
        self.source, self.name = source, name

    def scores(self, prompts: list, completions: list) -> list[float]:
        def text(value):
            return value[-1]["content"] if isinstance(value, list) else value

        return list(self.source([text(p) for p in prompts], [text(c) for c in completions]))


def app_judge(spec_text: str, db) -> AppJudge:
    """The judge a run's `judge` setting names (reward_spec's grammar; people are not a judge yet)."""
    spec = judge_spec(spec_text)
    if spec.source == "function":
        function = FunctionReward.from_spec(spec.function)
        # The user's function itself, so the run's error names it (FunctionReward would wrap its failures).
        return AppJudge(function.function, spec.function)
    from rlhf.reward import RewardScorer

    name = spec.model or models.newest(db, "reward")
    return AppJudge(RewardScorer(models.resolve(db, name)).score, f"rm:{name}")


def _args(ctx: StageContext):
    """The trainer config with the job's answer length (explicit trainer settings win)."""
    settings = StudioOnlineDPOConfig.job_settings(ctx.job, dict(ctx.trainer_settings))
    return trainer_args(dataclasses.replace(ctx, trainer_settings=settings), StudioOnlineDPOConfig)


def _rows(ctx: StageContext, db, tokenizer) -> tuple[list[dict], list[dict]]:
    """(the frozen rows, the trainer's rows): the training prompts as prompt-only rows, shuffled by the job's seed (a
    resumed run keeps its list); the trainer's conversational when the project sends prompts through the chat
    template, plain text otherwise."""
    rows = stage_rows(ctx, db, "online-dpo")
    random.Random(ctx.job.seed).shuffle(rows)
    rows = ctx.frozen_rows("prompts", rows)
    if not rows:
        raise InputError("the project has no prompts: import some first", field="data")
    chat = get_project(db, ctx.project).chat_template is not False and getattr(tokenizer, "chat_template", None) is not None
    return rows, [{"prompt": [{"role": "user", "content": r["prompt"]}] if chat else r["prompt"]} for r in rows]


def run_online_dpo(ctx: StageContext) -> RunResult:
    from datasets import Dataset

    from rlhf.peft_utils import is_peft_model, merged_model

    # 1. the model, the prompts and the settings
    db = ctx.open_db()
    base = ctx.job.base_model("online-dpo")
    path = models.resolve(db, base)
    tokenizer = load_tokenizer(path, padding_side="left")
    frozen, rows = _rows(ctx, db, tokenizer)
    args = _args(ctx)
    # 2. the judge
    judge = app_judge(args.judge, db)
    # 3. train (resuming from the newest checkpoint)
    trainer = OnlineDPOTrainer(path, judge=judge, args=args, train_dataset=Dataset.from_list(rows),
                               processing_class=tokenizer, peft_config=peft_config(ctx, "CAUSAL_LM"),
                               callbacks=trainer_callbacks(ctx))
    train_with_trainer(ctx, trainer)
    # 4. save a full model any from_pretrained loads (a LoRA adapter merged into its base)
    trainer.accelerator.wait_for_everyone()
    if trainer.accelerator.is_main_process:
        policy = trainer.accelerator.unwrap_model(trainer.model)
        if is_peft_model(policy):
            policy = merged_model(policy)
        policy.save_pretrained(ctx.final_dir, safe_serialization=True)
        tokenizer.save_pretrained(ctx.final_dir)
    return RunResult(str(ctx.final_dir), "policy", base, {}, data_snapshot("prompts", frozen))


__all__ = ["AppJudge", "StudioOnlineDPOConfig", "app_judge", "run_online_dpo"]
