"""What the stage runners share: the rows a run reads (export's row functions and filters), the split, the
transformers.Trainer arguments and the train / resume / evaluate sequence, LoRA, and the reward source of a
policy run (a function, a reward model, people in the app, or a mix). Every name here is public: the runners in
this package import them, and nothing here imports a runner.
"""
from __future__ import annotations

import random

from labeler.services.execution import checkpoints
from labeler.services.serving import models
from labeler.services.training import train_configs
from labeler.services.settings import training_stages
from labeler.errors import InputError
from labeler.services.labels.export import training_options
from labeler.services.labels.human_reward import HumanRewardQueue
from labeler.services.data.projects import get_project
from labeler.services.training.stages import RunResult, StageContext, data_snapshot, split_for_training
from labeler.services.settings.training_stages.base import MIN_TRAINING_ROWS, row_key
from rlhf.loading import cast_saved_weights, load_tokenizer
from rlhf.rewards import FunctionReward, HumanReward, MixReward, RewardModelReward


# ---- shared pieces -----------------------------------------------------------------------------------

def export_options(ctx: StageContext, **overrides):
    return training_options(ctx.job, **overrides)


def stage_rows(ctx: StageContext, db, stage: str, **options) -> list:
    """The stage's training rows (training_stages: the same function the preview counts with)."""
    return training_stages.get(stage).rows(db, ctx.project, ctx.job, **options)


def peft_config(ctx: StageContext, task_type: str):
    if not ctx.job.lora:
        return None
    from peft import LoraConfig

    return LoraConfig(r=ctx.job.lora_r, lora_alpha=ctx.job.lora_alpha, lora_dropout=0.0, task_type=task_type,
                      target_modules="all-linear")


def split_rows(rows: list[dict], test_size: float, seed: int):
    """datasets (train, eval or None), split by prompt as export's hf format is: every row of a prompt lands on
    the same side, so eval_accuracy measures unseen prompts (a row-level shuffle put pairs of one prompt on both
    sides and inflated it). Too few rows on either side for a meaningful eval -> no eval split."""
    from datasets import Dataset

    # The rows carry the prompt itself (text, or a message list), not its id; prompts are unique per project
    # (text hash), so the prompt's canonical JSON identifies it as well as the id would.
    train, test = split_for_training([(row_key(row), row) for row in rows], test_size, seed)
    return Dataset.from_list(train), (Dataset.from_list(test) if test else None)


def require_rows(rows: list, what: str, hint: str) -> None:
    if len(rows) < MIN_TRAINING_ROWS:
        raise InputError(f"only {len(rows)} {what} in the database with these filters; {hint}", field="data")


def trainer_args(ctx: StageContext, stage: str):
    """The run's trainer config, from its JobConfig and stored trainer settings only (train_configs.trainer_config,
    the one build the preview shows), writing its checkpoints under the run's folder."""
    return train_configs.trainer_config(stage, ctx.job, ctx.trainer_settings, output_dir=str(ctx.checkpoint_root))


def train_with_trainer(ctx: StageContext, trainer) -> dict[str, float]:
    """trainer.train() with our callbacks; resumes from the newest complete checkpoint; evaluates at the end."""
    resume = ctx.resume_checkpoint()
    if resume is not None:
        step = checkpoints.checkpoint_step(resume)
        ctx.sink.truncate_after(step)
        print(f"resuming from {resume}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    metrics = {}
    if trainer.eval_dataset is not None:
        metrics = {k: v for k, v in trainer.evaluate().items() if isinstance(v, (int, float))}
        ctx.sink.log(trainer.state.global_step, metrics)
    ctx.sink.progress(trainer.state.global_step)
    return metrics


def trainer_callbacks(ctx: StageContext) -> list:
    return [ctx.sink.trainer_callback(ctx.job.steps), checkpoints.manifest_callback()]


# ---- the stages on transformers.Trainer (SFT, RM, DPO, KTO) --------------------------------------------

def train_stage(ctx: StageContext, db, stage: str, rows: list[dict], trainer_cls, config_cls, task_type: str,
                 kind: str, snapshot: str, *, frozen: bool = False) -> RunResult:
    """The part SFT, RM, DPO and KTO share: split the rows, train with the stage's Trainer, save, describe.
    `frozen`: the caller has already frozen `rows` (ctx.frozen_rows; KTO weighs its classes on them first)."""
    if not frozen:
        rows = ctx.frozen_rows("train_rows", rows)  # a resumed run keeps the rows it started with
    base = ctx.job.base_model(stage)
    path = models.resolve(db, base)
    train, test = split_rows(rows, ctx.job.test_size, ctx.job.seed)
    trainer = trainer_cls(path, args=trainer_args(ctx, stage), train_dataset=train, eval_dataset=test,
                          processing_class=load_tokenizer(path, padding_side="right"),
                          peft_config=peft_config(ctx, task_type), callbacks=trainer_callbacks(ctx))
    metrics = train_with_trainer(ctx, trainer)
    trainer.save_model(str(ctx.final_dir))
    if kind == "policy" and trainer.args.should_save:
        # The fp32 master weights written in the base's own dtype, as the PPO and online runners write theirs: a
        # bf16 base's tuned model takes half the disk (6.2 GB for 3.1 at 1.5B) and loads as its base does
        cast_saved_weights(ctx.final_dir, path)
    return RunResult(str(ctx.final_dir), kind, base, metrics, data_snapshot(snapshot, rows))


def policy_kind(ctx: StageContext) -> str:
    return "adapter" if ctx.job.lora else "policy"


def conversational(ctx: StageContext, db, stage: str) -> bool:
    """Whether a policy trains on conversations (SFT, DPO, KTO): when the project's prompts go through the chat
    template and the base model's tokenizer has one (its template then renders them, as generation did), else on
    plain prompt + answer text (prompt format 'continue')."""
    chat = get_project(db, ctx.project).prompt_format == "chat"
    if chat:
        tokenizer = load_tokenizer(models.resolve(db, ctx.job.base_model(stage)))
        chat = getattr(tokenizer, "chat_template", None) is not None
    return chat


def policy_rows_options(ctx: StageContext, db, stage: str, **overrides):
    """Export options for the rows a policy trains on (see `conversational`)."""
    return export_options(ctx, conversational=conversational(ctx, db, stage), **overrides)


# ---- a policy run's rewards and prompts (PPO, GRPO, RLOO) ----------------------------------------------

def human_queue(ctx: StageContext):
    """The run's rating queue when the job's rewards come from people (human, mix), else None."""
    if ctx.job.reward not in ("human", "mix"):
        return None
    return HumanRewardQueue(ctx.db_path, ctx.project, ctx.run_id, policy=ctx.job.timeout_policy,
                            model_name=f"ppo-run{ctx.run_id}", should_stop=ctx.should_stop,
                            label_kind=ctx.job.human_label, group_size=ctx.job.answers_per_prompt)


def reward_source(ctx: StageContext, db, queue=None):
    """The PPO reward callable chosen by the job: rm, human, mix or function (human/mix wait on `queue`, or
    on a new human_queue)."""
    job = ctx.job
    if job.reward == "function":
        return FunctionReward.from_spec(job.reward_function)

    def rm():
        import torch

        path = models.resolve(db, job.reward_model or models.newest(db, "reward"))
        # Once per rank, each scoring its own rollouts; in bf16 when the run trains in bf16 (docs/SCALING.md).
        return RewardModelReward.from_pretrained(path, job.subtract_query_score, score_std=job.rm_score_std,
                                                 dtype=torch.bfloat16 if job.bf16 else None)

    if job.reward == "rm":
        return rm()
    queue = queue or human_queue(ctx)
    if job.reward == "mix" and job.online_rm:
        return active_mix(ctx, db, queue)
    human = HumanReward(queue.request_and_wait, timeout=job.human_timeout)
    if job.reward == "mix":
        return MixReward(human, rm(), job.w_human, job.w_rm)
    if job.timeout_policy == "rm":  # human only, but the reward model fills in what nobody rated in time
        return MixReward(human, rm(), 1.0, 0.0)
    return human


def active_mix(ctx: StageContext, db, queue):
    """reward=mix with online_rm: people judge the groups the online reward model is least sure of, the model
    learns from each label and scores the rest (labeler/services/labels/online_reward.py)."""
    from labeler.services.labels.online_reward import ActiveMixReward, OnlineRewardModel
    from rlhf.reward import RewardScorer

    job = ctx.job
    # A run stored before mix runs stored their warm start takes the newest now; none yet: the encoder alone.
    warm_start = job.reward_model or models.newest_or_blank(db, "reward")
    prior = RewardScorer(models.resolve(db, warm_start)).score if warm_start else None
    model = OnlineRewardModel(ctx.db_path, ctx.project, refit_every=job.rm_refit_every, seed=job.seed, prior=prior)
    return ActiveMixReward(queue, model, human_share=job.human_share, timeout=job.human_timeout, seed=job.seed)


def policy_prompts(ctx: StageContext, db, stage: str) -> list[str]:
    """The stage's training prompts (held-out ones are never trained on), shuffled by the job's seed."""
    texts = stage_rows(ctx, db, stage)
    random.Random(ctx.job.seed).shuffle(texts)
    return texts

