"""The built-in stages: SFT, reward model, DPO (transformers.Trainer-based) and PPO (our PPOTrainer loop).

Each reads its data straight from the database through export's row functions and filters, trains with the
rlhf library, reports through the MetricsSink, checkpoints every `checkpoint_every` steps and resumes from the
newest complete checkpoint, stops early when asked, and returns what to register.
"""
from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labeler import forms
from labeler.services import checkpoints, evaluation, models
from labeler.services.errors import InputError
from labeler.services.export import ExportOptions, preference_rows, split_by_prompt, unpaired_rows
from labeler.services.human_reward import HumanRewardQueue
from labeler.services.metrics_sink import main_process_decides
from labeler.services.projects import get_project
from labeler.services.prompts import split_texts
from labeler.services.stages import RunResult, StageContext, checkpoint_due, data_snapshot
from rlhf.configs import PPOConfig
from rlhf.loading import load_tokenizer
from rlhf.precision import model_load_kwargs
from rlhf.rewards import FunctionReward, HumanReward, MixReward, RewardModelReward

JOB_STATE_FILE = "job_state.json"


# ---- shared pieces -----------------------------------------------------------------------------------

def export_options(ctx: StageContext, **overrides):
    job = ctx.job
    annotators = tuple(a.strip() for a in job.annotators.split(",") if a.strip()) or None
    return ExportOptions(annotators=annotators, min_annotators=job.min_annotators, min_agreement=job.min_agreement,
                         include_rating_pairs=job.include_rating_pairs, seed=job.seed, training=True, **overrides)


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
    records = [(json.dumps(row["prompt"], sort_keys=True, ensure_ascii=False), row) for row in rows]
    train, test = split_by_prompt(records, test_size, seed)
    if len(test) < 2 or len(train) < 2:
        return Dataset.from_list(list(rows)), None
    return Dataset.from_list(train), Dataset.from_list(test)


def _require_rows(rows: list, what: str, hint: str) -> None:
    if len(rows) < 2:
        raise InputError(f"only {len(rows)} {what} in the database with these filters; {hint}", field="data")


def _trainer_args(ctx: StageContext, config_cls):
    job = ctx.job
    every = job.checkpoint_every
    values: dict[str, Any] = {
        "output_dir": str(ctx.checkpoint_root),
        "report_to": "none",
        "max_steps": job.steps,
        "logging_steps": 1,  # every step in the live plot
        "save_strategy": "steps" if every else "no",
        "save_steps": every or 500,
        "save_total_limit": 2,
        "bf16": job.bf16,
        "seed": job.seed,
        "data_seed": job.seed,
        "disable_tqdm": False,
    }
    values.update(ctx.trainer_settings)  # explicit trainer settings win
    return forms.build_config(config_cls, values)


def _train_with_trainer(ctx: StageContext, trainer) -> dict[str, float]:
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


def _callbacks(ctx: StageContext) -> list:
    return [ctx.sink.trainer_callback(ctx.job.steps), checkpoints.manifest_callback()]


# ---- SFT, reward model, DPO ----------------------------------------------------------------------------

def _train_stage(ctx: StageContext, db, stage: str, rows: list[dict], trainer_cls, config_cls, task_type: str,
                 kind: str, snapshot: str, *, frozen: bool = False) -> RunResult:
    """The part SFT, RM, DPO and KTO share: split the rows, train with the stage's Trainer, save, describe.
    `frozen`: the caller has already frozen `rows` (ctx.frozen_rows; KTO weighs its classes on them first)."""
    if not frozen:
        rows = ctx.frozen_rows("train_rows", rows)  # a resumed run keeps the rows it started with
    base = ctx.job.base_model(stage)
    path = models.resolve(db, base)
    train, test = split_rows(rows, ctx.job.test_size, ctx.job.seed)
    trainer = trainer_cls(path, args=_trainer_args(ctx, config_cls), train_dataset=train, eval_dataset=test,
                          processing_class=load_tokenizer(path, padding_side="right"),
                          peft_config=peft_config(ctx, task_type), callbacks=_callbacks(ctx))
    metrics = _train_with_trainer(ctx, trainer)
    trainer.save_model(str(ctx.final_dir))
    return RunResult(str(ctx.final_dir), kind, base, metrics, data_snapshot(snapshot, rows))


def _policy_kind(ctx: StageContext) -> str:
    return "adapter" if ctx.job.lora else "policy"


def _policy_rows_options(ctx: StageContext, db, stage: str, **overrides):
    """Export options for the rows a policy trains on (SFT, DPO): conversations when the project's prompts
    go through the chat template and the base model's tokenizer has one (its template then renders them, as
    generation did), plain prompt + answer text otherwise (prompt format 'continue')."""
    chat = get_project(db, ctx.project).prompt_format == "chat"
    if chat:
        tokenizer = load_tokenizer(models.resolve(db, ctx.job.base_model(stage)))
        chat = getattr(tokenizer, "chat_template", None) is not None
    return export_options(ctx, conversational=chat, **overrides)


def run_sft(ctx: StageContext) -> RunResult:
    from rlhf.sft import SFTConfig, SFTTrainer

    db = ctx.open_db()
    # Well-rated answers (mean score >= threshold, default the scale's midpoint) are the demonstrations.
    options = _policy_rows_options(ctx, db, "sft", threshold=ctx.job.sft_min_score)
    rows = [r for r in unpaired_rows(db, ctx.project, options) if r["label"]]
    rows = [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]
    _require_rows(rows, "well-rated answers", "rate more answers (SFT trains on answers rated at or above sft_min_score)")
    return _train_stage(ctx, db, "sft", rows, SFTTrainer, SFTConfig, "CAUSAL_LM", _policy_kind(ctx), "sft")


def _preference_pairs(ctx: StageContext, db, options=None) -> list[dict]:
    rows = preference_rows(db, ctx.project, options or export_options(ctx))
    _require_rows(rows, "preference pairs", "rank answers (or rate two answers per prompt with include_rating_pairs)")
    return rows


def run_rm(ctx: StageContext) -> RunResult:
    from rlhf.reward import RewardConfig, RewardTrainer

    db = ctx.open_db()
    rows = _preference_pairs(ctx, db)
    return _train_stage(ctx, db, "rm", rows, RewardTrainer, RewardConfig, "SEQ_CLS", "reward", "preferences")


def run_dpo(ctx: StageContext) -> RunResult:
    from rlhf.dpo import DPOConfig, DPOTrainer

    db = ctx.open_db()
    rows = _preference_pairs(ctx, db, _policy_rows_options(ctx, db, "dpo"))
    return _train_stage(ctx, db, "dpo", rows, DPOTrainer, DPOConfig, "CAUSAL_LM", _policy_kind(ctx), "preferences")


# ---- PPO ------------------------------------------------------------------------------------------------

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
    learns from each label and scores the rest (labeler/services/online_reward.py)."""
    from labeler.services.online_reward import ActiveMixReward, OnlineRewardModel
    from rlhf.reward import RewardScorer

    job = ctx.job
    warm_start = job.reward_model
    if not warm_start:
        try:
            warm_start = models.newest(db, "reward")  # the project's reward model, if it has one
        except InputError:
            warm_start = ""  # none yet: start from the encoder alone
    prior = RewardScorer(models.resolve(db, warm_start)).score if warm_start else None
    model = OnlineRewardModel(ctx.db_path, ctx.project, refit_every=job.rm_refit_every, seed=job.seed, prior=prior)
    return ActiveMixReward(queue, model, human_share=job.human_share, timeout=job.human_timeout, seed=job.seed)


def ppo_prompts(db, project: str, seed: int) -> list[str]:
    # Held-out prompts (split 'test') are never trained on.
    texts = split_texts(db, get_project(db, project).id, "train")
    random.Random(seed).shuffle(texts)
    return texts


@dataclass
class Rollout:
    """One sampled answer on its way to a PPO step."""

    query: Any  # prompt token ids (1-D tensor)
    response: Any  # answer token ids (1-D tensor), up to and including EOS
    prompt: str
    answer: str
    behaviour_logprobs: Any = None  # overlap only: the answer's log-probs under the policy that sampled it
    score: float | None = None  # None: no reward (nobody rated it in time), dropped before the step


# The app's KL controller for every PPO run, unless the user sets it: beta never falls below its start and moves up
# to 20% a step with the recipe's 64 answers. Every run starts at KL 0, below any target, so the plain controller
# first lowers beta and then climbs back too late. Measured (40 steps, the shipped task, CPU with bf16): with the
# plain controller (horizon 512, no floor) the function-reward run's KL sat at 9-12 from step 19 against a target of
# 6 (beta 0.030 -> 0.035; held-out 88% positive, KL 8.2); with these settings 5.4-7.3 over the last 10 steps (beta
# 0.030 -> 0.053; held-out 91% positive, KL 6.9). Rewards from people (centred ranks) and the online reward model
# keep the same spread however good the answers get, so only the controller can hold their KL: with the plain
# controller a mix run's KL reached 22 nats by step 28.
APP_KL_HORIZON = 64


def kl_settings_for(trainer_settings: dict) -> dict:
    """The KL controller settings a PPO run gets unless the user set them."""
    start = trainer_settings.get("init_kl_coef", PPOConfig.__dataclass_fields__["init_kl_coef"].default)
    defaults = {"horizon": APP_KL_HORIZON, "kl_coef_min": start}
    return {name: value for name, value in defaults.items() if name not in trainer_settings}


def run_ppo(ctx: StageContext) -> RunResult:
    """PPO on the project's prompts. With N processes (accelerate launch) each rank generates and scores its
    own batch_size answers to its own share of the prompts (the global batch is N * batch_size), and every
    decision that ends a loop (a full batch, the stop flag) is taken by all ranks together; the main process
    alone writes the database, the checkpoints and the final model. N=1 is the same code."""
    import torch

    from rlhf.generation import build_prompt_ids
    from rlhf.ppo import PPOTrainer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    job = ctx.job
    db = ctx.open_db()
    prompts = ctx.frozen_rows("prompts", ppo_prompts(db, ctx.project, job.seed))  # a resume keeps them
    chat_template = get_project(db, ctx.project).chat_template  # the project's prompt format
    if not prompts:
        raise InputError("the project has no prompts: import some first", field="data")
    base = job.base_model("ppo")
    path = models.resolve(db, base)
    tokenizer = load_tokenizer(path, padding_side="left")
    config = forms.build_config(PPOConfig, {"seed": job.seed, "bf16": job.bf16,
                                            **kl_settings_for(ctx.trainer_settings), **ctx.trainer_settings})
    model = AutoModelForCausalLMWithValueHead.from_pretrained(path, peft_config=peft_config(ctx, "CAUSAL_LM"),
                                                              seed=job.seed, **model_load_kwargs(config, job.lora))
    trainer = PPOTrainer(config, model, None, tokenizer, callback=_samples_limited(ctx))
    accelerator = trainer.accelerator
    rank, world = accelerator.process_index, accelerator.num_processes
    if world > 1 and job.reward in ("human", "mix"):
        raise InputError(f"reward={job.reward} needs one process (the rating queue is the main process's); "
                         f"this run has {world}", field="num_processes")

    def should_stop() -> bool:
        """The main process's stop flag on every rank (a broadcast): call it at the same point on all ranks."""
        return main_process_decides(ctx.should_stop())

    def any_rank(flag: bool) -> bool:
        """True on every rank when it is True on one (a sum over ranks; N=1: the flag itself)."""
        if world == 1:
            return flag
        return bool(accelerator.reduce(torch.tensor([float(flag)], device=accelerator.device), "sum")[0] > 0)

    queue = human_queue(ctx)
    reward = reward_source(ctx, db, queue)
    # Overlap: batch k+1 is generated and queued for rating before waiting for batch k's ratings, so people
    # rate while the trainer steps and the trainer steps while people rate. Batch k+1 is then one update
    # stale; the PPO ratio is taken against the log-probs of the policy that sampled it.
    overlap = job.human_overlap and queue is not None

    position = 0
    resume = ctx.resume_checkpoint()
    if resume is not None:
        trainer.load_checkpoint(resume)
        position = json.loads((resume / JOB_STATE_FILE).read_text())["position"]
        ctx.sink.truncate_after(trainer.current_step)
        print(f"resumed from {resume} at step {trainer.current_step}", flush=True)
    ctx.sink.progress(trainer.current_step, job.steps)
    generation = {"max_new_tokens": job.max_new_tokens, "do_sample": True, "top_k": 0, "top_p": 1.0}

    def rollout_batch() -> list[Rollout]:
        """The next batch: answers_per_prompt answers to each of the next prompts, batch_size in all."""
        nonlocal position
        # answers_per_prompt answers to each prompt (RLOO's groups), batch_size answers in all. The ranks take
        # consecutive shares of the next world * n_prompts prompts: rank r the r-th.
        n_prompts = config.prompts_per_batch(job.answers_per_prompt)  # PPO's rollout rule: ValueError if broken
        first = position + rank * n_prompts
        texts = [prompts[(first + i) % len(prompts)] for i in range(n_prompts) for _ in range(job.answers_per_prompt)]
        position += world * n_prompts
        queries = [build_prompt_ids(tokenizer, text, use_chat_template=chat_template) for text in texts]
        responses = trainer.generate(queries, return_prompt=False, batch_size=config.batch_size, **generation)
        answers = tokenizer.batch_decode(responses, skip_special_tokens=True)
        rollouts = [Rollout(q, r, t, a) for q, r, t, a in zip(queries, responses, texts, answers)]
        if overlap:
            kept = [r for r in rollouts if len(r.response) > 0]  # empty ones are dropped before step
            if kept:
                computed = trainer.behaviour_logprobs([r.query for r in kept], [r.response for r in kept])
                for rollout, logprobs in zip(kept, computed):
                    rollout.behaviour_logprobs = logprobs
            getattr(reward, "request_ahead", queue.request_ahead)(texts, answers)  # a mix picks its groups first
        return rollouts

    check_heldout = heldout_check(ctx, db, trainer, tokenizer, chat_template) if accelerator.is_main_process else None
    ahead: list[Rollout] = []  # overlap: the next batch, generated and already in the rating queue
    buffer: list[Rollout] = []  # scored rollouts waiting for a full batch
    if resume is not None and queue is not None:
        buffer = resumed_rollouts(queue, tokenizer, chat_template, job.human_timeout)
    try:
        while trainer.current_step < job.steps:
            # Rollouts whose reward is None (nobody rated them in time, policy "skip") or empty are dropped;
            # kept ones wait in the buffer until a full batch is there, on every rank: a rank whose buffer is
            # full generates along with the others (its extra rollouts wait for the next step), so every rank
            # makes the same generate() calls (collectives under ZeRO-3) and steps together.
            while any_rank(len(buffer) < config.batch_size):
                rollouts, ahead = ahead or rollout_batch(), []
                if overlap and trainer.current_step + 1 < job.steps and not should_stop():
                    ahead = rollout_batch()  # at most one batch ahead
                scores = reward([r.prompt for r in rollouts], [r.answer for r in rollouts])
                for rollout, score in zip(rollouts, scores):
                    rollout.score = score
                buffer += [r for r in rollouts if r.score is not None and len(r.response) > 0]
                if should_stop():
                    break
            if any_rank(len(buffer) < config.batch_size):
                break
            batch, buffer = buffer[: config.batch_size], buffer[config.batch_size:]
            score_tensors = [torch.tensor(float(r.score)) for r in batch]
            stats = trainer.step([r.query for r in batch], [r.response for r in batch], score_tensors,
                                 old_logprobs=[r.behaviour_logprobs for r in batch] if overlap else None)
            stats.update(trainer.gather_stats(dict(reward.last_stats)))  # the mean over ranks, as step()'s
            trainer.log_stats(stats, {"query": [r.prompt for r in batch], "response": [r.answer for r in batch]},
                              score_tensors)
            ctx.sink.progress(trainer.current_step, job.steps)
            if check_heldout is not None:
                check_heldout(trainer.current_step)
            if checkpoint_due(job, trainer.current_step):  # every step when people's labels went into it
                # The batch generated ahead is not trained on yet: a resumed run generates it again.
                def write(folder: Path, position=position - world * (len(ahead) // job.answers_per_prompt)):
                    trainer.save_checkpoint(folder)  # every rank: it gathers their RNG states
                    (folder / JOB_STATE_FILE).write_text(json.dumps({"position": position}))
                ctx.save_checkpoint(trainer.current_step, write)  # the main process's folder is the checkpoint
            if should_stop():
                print(f"early stop after step {trainer.current_step}", flush=True)
                break
    finally:
        if queue is not None:
            queue.release_ahead()
    # A full model that AutoModelForCausalLM.from_pretrained loads (a LoRA adapter merged into its base), so
    # chat, eval and other tools take it as it is; the value head is saved beside it for a later resume.
    # Saved by the main process once every rank has finished stepping (under DDP its weights are everyone's;
    # ZeRO-3 / FSDP shards are gathered first, a collective every rank enters: None when not sharded).
    accelerator.wait_for_everyone()
    weights = trainer.gathered_state_dict()
    if accelerator.is_main_process:
        trainer.unwrapped_model.save_merged(ctx.final_dir, state_dict=weights)
        tokenizer.save_pretrained(ctx.final_dir)
    return RunResult(str(ctx.final_dir), "policy", base, {}, data_snapshot("prompts", prompts))


def resumed_rollouts(queue, tokenizer, chat_template, timeout: float) -> list[Rollout]:
    """A resumed run's first rollouts: the answers it had put before people when it stopped, waited for on the
    same items (their labels are not asked for twice, nor lost), as rollouts with their rewards. Token ids come
    from the stored text (the sampled ids were not kept); rollouts nobody labelled in time are dropped."""
    from rlhf.generation import build_prompt_ids

    pending = queue.pending()
    if not pending:
        return []
    item_ids = [item_id for item_id, _, _ in pending]
    texts = [(prompt, answer) for _, prompt, answers in pending for answer in answers]
    rewards = queue.wait(item_ids, timeout)
    rollouts = []
    for (prompt, answer), reward in zip(texts, rewards):
        response = tokenizer(answer, add_special_tokens=False, return_tensors="pt").input_ids[0]
        if reward is not None and len(response) > 0:
            query = build_prompt_ids(tokenizer, prompt, use_chat_template=chat_template)
            rollouts.append(Rollout(query, response, prompt, answer, score=reward))
    print(f"resumed: {len(rollouts)} answers labelled while the run was down (or since) join the next step",
          flush=True)
    return rollouts


def heldout_check(ctx: StageContext, db, trainer, tokenizer, chat_template):
    """`check(step)`: every job.heldout_every steps, one answer per held-out prompt from the current policy, scored
    as the final evaluation scores them (evaluation.auto_settings: the run's reward function, else VADER), logged
    as eval/positive_share and eval/reward_mean at that step. None when off or there is nothing to check on (no
    held-out prompts, or several processes: the policy's weights are sharded or replicated across ranks)."""
    from rlhf.evaluation import evaluate_policy
    from rlhf.generation import build_prompt_ids

    job = ctx.job
    prompts = evaluation.heldout_prompts(db, ctx.project)
    if not job.heldout_every or not prompts or trainer.accelerator.num_processes > 1:
        return None
    settings = evaluation.auto_settings(dataclasses.replace(job, eval_samples=1))  # its reward and threshold
    reward_fn = evaluation.reward_function(db, settings.reward)

    def check(step: int) -> None:
        if step % job.heldout_every or step >= job.steps:  # the last step gets the full evaluation instead
            return
        result = evaluate_policy(trainer.unwrapped_model.pretrained_model, tokenizer, prompts, reward_fn, samples=1,
                                 max_new_tokens=job.max_new_tokens, threshold=settings.threshold, seed=job.seed + step,
                                 bf16=job.bf16,
                                 build_query=lambda text: build_prompt_ids(tokenizer, text, use_chat_template=chat_template))
        metrics = {k: v for k, v in result.metrics().items() if k in ("eval/positive_share", "eval/reward_mean")}
        ctx.sink.log(step, metrics)
        print(f"step {step}: held-out " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()), flush=True)
    return check


def _samples_limited(ctx: StageContext):
    """PPOTrainer's callback: metrics every step, only the first `samples_per_step` generations kept."""
    def callback(step: int, stats: dict, samples: list[dict]) -> None:
        ctx.sink.ppo_callback(step, stats, samples[: ctx.job.samples_per_step])
    return callback


def _online(name: str):
    """A TRL 1.x stage's runner (labeler/services/stage_runners_online.py, which imports this module)."""
    def run(ctx: StageContext) -> RunResult:
        from labeler.services import stage_runners_online

        return stage_runners_online.RUNNERS[name](ctx)
    return run


RUNNERS = {"sft": run_sft, "rm": run_rm, "dpo": run_dpo, "ppo": run_ppo,
           "grpo": _online("grpo"), "rloo": _online("rloo"), "kto": _online("kto")}
