"""PPO: our PPOTrainer's loop over the project's prompts, rewarded by the job's reward source (common.reward_source),
with overlap (people rate batch k while the trainer steps on batch k-1), held-out checks and resumable checkpoints.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labeler.services.evals import evaluation
from labeler.services.serving import models
from labeler.services.execution import step_journal
from labeler.services.training import train_configs
from labeler.services.execution.checkpoints import REWARD_STATE_FILE, WeightsPacer
from labeler.services.training.criteria_reward import combined_reward
from labeler.errors import InputError
from labeler.services.execution.metrics_sink import main_process_decides
from labeler.services.data.projects import get_project
from labeler.services.training.runners.common import human_queue, peft_config, policy_prompts, reward_source
from labeler.services.training.runners.rollouts import Rollout, RolloutStream, resumed_rollouts
from labeler.services.training.stages import RunResult, StageContext, checkpoint_due, data_snapshot
from labeler.services.settings.training_stages.ppo import kl_settings_for  # noqa: F401 - callers import it here
from rlhf.configs import PPOConfig
from rlhf.loading import load_tokenizer, stored_dtype
from rlhf.precision import model_load_kwargs


def run_ppo(ctx: StageContext) -> RunResult:
    """PPO on the project's prompts. With N processes (accelerate launch) each rank generates and scores its
    own batch_size answers to its own share of the prompts (the global batch is N * batch_size), and every
    decision that ends a loop (a full batch, the stop flag) is taken by all ranks together; the main process
    alone writes the database, the checkpoints and the final model. N=1 is the same code."""
    job = ctx.job
    db = ctx.open_db()
    # 1. the prompts (a resume keeps them), the policy with its value head, the trainer
    prompts = ctx.frozen_rows("prompts", policy_prompts(ctx, db, "ppo"))
    chat_template = get_project(db, ctx.project).chat_template  # the project's prompt format
    if not prompts:
        raise InputError("the project has no prompts: import some first", field="data")
    base = job.base_model("ppo")
    path = models.resolve(db, base)
    tokenizer = load_tokenizer(path, padding_side="left")
    trainer = ppo_trainer(ctx, path, tokenizer)
    config = trainer.config
    ranks = Ranks(trainer.accelerator, ctx)
    if ranks.world > 1 and job.reward in ("human", "mix"):
        raise InputError(f"reward={job.reward} needs one process (the rating queue is the main process's); "
                         f"this run has {ranks.world}", field="num_processes")

    # 2. the rewards, and the stream of rollouts they score. Overlap: batch k+1 is generated and queued for rating
    # before waiting for batch k's ratings, so people rate while the trainer steps and the trainer steps while
    # people rate. Batch k+1 is then one update stale; the PPO ratio is taken against the log-probs of the policy
    # that sampled it.
    queue = human_queue(ctx)
    reward = combined_reward(db, job) or reward_source(ctx, db, queue)  # several criteria, or one source
    overlap = job.human_overlap and queue is not None
    stream = RolloutStream(
        prompts, answers_per_prompt=job.answers_per_prompt, rank=ranks.rank, world=ranks.world,
        prompts_per_batch=lambda: config.prompts_per_batch(job.answers_per_prompt),  # ValueError if broken
        sample=sampler(trainer, tokenizer, chat_template, job, overlap), reward=reward,
        request_ahead=getattr(reward, "request_ahead", queue.request_ahead) if overlap else None)

    # 3. resume: the trainer's state, the stream's position, the journalled steps after it trained again (people's
    # labels: their weights are written only now and then), and the answers people were rating
    resume = ctx.resume_checkpoint()
    if resume is not None:
        trainer.load_checkpoint(resume)
        stream.read_state(resume)
        read_reward_state(reward, resume)
        ctx.sink.truncate_after(trainer.current_step)
        print(f"resumed from {resume} at step {trainer.current_step}", flush=True)
    journal = step_journal.steps_after(db, ctx.run_id, trainer.current_step) if queue is not None else []
    if journal:
        ctx.sink.truncate_after(trainer.current_step)
        replay_journal(trainer, tokenizer, chat_template, stream, journal)
    ctx.sink.progress(trainer.current_step, job.steps)
    check_heldout = heldout_check(ctx, db, trainer, tokenizer, chat_template) if ranks.is_main else None
    if (resume is not None or journal) and queue is not None:
        stream.buffer += resumed_rollouts(queue, tokenizer, chat_template, job.human_timeout)
    pacer = WeightsPacer(job.checkpoint_share) if queue is not None else None

    # 4. the loop: a full batch, a step, its metrics, a held-out check and a checkpoint when due, the stop flag
    try:
        while trainer.current_step < job.steps:
            if not stream.fill(config.batch_size, any_rank=ranks.any, should_stop=ranks.should_stop,
                               look_ahead=lambda: trainer.current_step + 1 < job.steps and not ranks.should_stop()):
                break
            batch = stream.take(config.batch_size)
            if queue is not None:  # journalled before the step: a crash inside it trains it again on resume
                journal_step(db, ctx.run_id, trainer.current_step + 1, stream, batch)
            ppo_step(trainer, batch, dict(reward.last_stats), overlap)
            ranks.agree_on_reward_state(reward)
            ctx.sink.progress(trainer.current_step, job.steps)
            if check_heldout is not None:
                check_heldout(trainer.current_step)
            if checkpoint_due(job, trainer.current_step, pacer):  # people's labels: as the pacer allows
                with pacer.writing() if pacer is not None else contextlib.nullcontext():
                    save_checkpoint(ctx, trainer, stream, reward)
            if ranks.should_stop():
                print(f"early stop after step {trainer.current_step}", flush=True)
                break
    finally:
        if queue is not None:
            queue.release_ahead()

    # 5. the final model
    save_policy(ctx, trainer, tokenizer, path)
    return RunResult(str(ctx.final_dir), "policy", base, {}, data_snapshot("prompts", prompts))


def ppo_trainer(ctx: StageContext, path: str, tokenizer):
    """The PPOTrainer of a run: its ppo_config, the policy with its value head (LoRA when asked), metrics to the
    run's sink."""
    from rlhf.ppo import PPOTrainer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    job = ctx.job
    config = ppo_config(ctx)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(path, peft_config=peft_config(ctx, "CAUSAL_LM"),
                                                              seed=job.seed, **model_load_kwargs(config, job.lora))
    return PPOTrainer(config, model, None, tokenizer, callback=_samples_limited(ctx))


def ppo_config(ctx: StageContext) -> PPOConfig:
    """The run's PPOConfig: the job's seed and bf16 and the stored trainer settings, the app's KL controller
    included (stored when the run was resolved), built as the preview builds it (train_configs.trainer_config)."""
    return train_configs.trainer_config("ppo", ctx.job, ctx.trainer_settings)


@dataclass
class Ranks:
    """The decisions every rank of a run takes together (each a collective: call it at the same point on all)."""

    accelerator: Any
    ctx: StageContext

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    def should_stop(self) -> bool:
        """The main process's stop flag on every rank (a broadcast)."""
        return main_process_decides(self.ctx.should_stop())

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on one (a sum over ranks; N=1: the flag itself)."""
        if self.world == 1:
            return flag
        import torch

        device = self.accelerator.device
        return bool(self.accelerator.reduce(torch.tensor([float(flag)], device=device), "sum")[0] > 0)

    def sum_over_ranks(self, values: list[float]) -> list[float]:
        """Each value summed over ranks (one all-reduce, in float64)."""
        import torch

        device = self.accelerator.device
        return self.accelerator.reduce(torch.tensor(values, dtype=torch.float64, device=device), "sum").tolist()

    def agree_on_reward_state(self, reward) -> None:
        """After a step on several processes: a reward that keeps state per batch (a constraint's multiplier and
        its threshold at the base's level, rlhf.constraints.ConstrainedReward.synchronise) takes the values of the
        whole batch over every rank, so every rank scores the next batch alike and the checkpoint saves them."""
        synchronise = getattr(reward, "synchronise", None)
        if self.world > 1 and synchronise is not None:
            synchronise(self.sum_over_ranks)


def sampler(trainer, tokenizer, chat_template, job, overlap: bool):
    """`sample(texts)`: the policy's answers to prompt texts as Rollouts (with overlap, with the log-probs of the
    policy that sampled them)."""
    from rlhf.generation import build_prompt_ids

    generation = {"max_new_tokens": job.max_new_tokens, "do_sample": True, "top_k": 0, "top_p": 1.0}

    def sample(texts: list[str]) -> list[Rollout]:
        queries = [build_prompt_ids(tokenizer, text, use_chat_template=chat_template) for text in texts]
        responses = trainer.generate(queries, return_prompt=False, batch_size=trainer.config.batch_size, **generation)
        answers = tokenizer.batch_decode(responses, skip_special_tokens=True)
        rollouts = [Rollout(q, r, t, a) for q, r, t, a in zip(queries, responses, texts, answers)]
        if overlap:
            kept = [r for r in rollouts if len(r.response) > 0]  # empty ones are dropped before step
            if kept:
                computed = trainer.behaviour_logprobs([r.query for r in kept], [r.response for r in kept])
                for rollout, logprobs in zip(kept, computed):
                    rollout.behaviour_logprobs = logprobs
        return rollouts
    return sample


def ppo_step(trainer, batch: list[Rollout], reward_stats: dict, overlap: bool) -> None:
    """One PPOTrainer step on a batch of scored rollouts, its stats (the reward source's too) logged."""
    import torch

    score_tensors = [torch.tensor(float(r.score)) for r in batch]
    stats = trainer.step([r.query for r in batch], [r.response for r in batch], score_tensors,
                         old_logprobs=[r.behaviour_logprobs for r in batch] if overlap else None)
    stats.update(trainer.gather_stats(reward_stats))  # the mean over ranks, as step()'s
    trainer.log_stats(stats, {"query": [r.prompt for r in batch], "response": [r.answer for r in batch]},
                      score_tensors)


def journal_entry(rollout: Rollout) -> dict:
    """A scored rollout as the journal keeps it: the prompt, the answer, its sampled token ids and its reward."""
    return {"prompt": rollout.prompt, "answer": rollout.answer, "response": [int(t) for t in rollout.response],
            "score": float(rollout.score)}


def journal_step(db, run_id: int, step: int, stream: RolloutStream, batch: list[Rollout]) -> None:
    """Journal the batch step `step` trains on, the scored rollouts left for later and where the stream resumes."""
    step_journal.record_step(db, run_id, step, stream.resume_position, [journal_entry(r) for r in batch],
                             [journal_entry(r) for r in stream.buffer])


def journal_rollouts(entries: list[dict], tokenizer, chat_template) -> list[Rollout]:
    """Journal entries as scored rollouts again: the query rendered as sampling rendered it, the answer's sampled
    token ids as they were."""
    import torch
    from rlhf.generation import build_prompt_ids

    return [Rollout(build_prompt_ids(tokenizer, e["prompt"], use_chat_template=chat_template),
                    torch.tensor(e["response"], dtype=torch.long), e["prompt"], e["answer"], score=e["score"])
            for e in entries]


def replay_journal(trainer, tokenizer, chat_template, stream: RolloutStream, journal: list) -> None:
    """Train the journalled steps after the loaded checkpoint again, in order, on the answers and rewards they had
    (people are not asked again), then continue the stream where the last of them left it. The PPO ratio is taken
    against the policy being replayed (the log-probs of the one that sampled them, kept with overlap, are not
    journalled): on the first epoch of each step the ratio is 1, as without overlap."""
    for entry in journal:
        ppo_step(trainer, journal_rollouts(entry.batch, tokenizer, chat_template), {}, overlap=False)
    last = journal[-1]
    stream.position = last.position
    stream.buffer = journal_rollouts(last.waiting, tokenizer, chat_template)
    print(f"trained the {len(journal)} journalled steps after the checkpoint again (steps {journal[0].step}-"
          f"{last.step}): people's labels since it are kept", flush=True)


def save_checkpoint(ctx: StageContext, trainer, stream: RolloutStream, reward=None) -> None:
    """A resumable checkpoint: the trainer's state, the stream's position (the batch generated ahead is not
    trained on yet: a resumed run generates it again) and the reward's own state where it keeps one (a
    constraint's Lagrange multiplier: write_reward_state)."""
    def write(folder: Path, position=stream.resume_position):
        trainer.save_checkpoint(folder)  # every rank: it gathers their RNG states
        stream.write_state(folder, position)
        write_reward_state(reward, folder)
    ctx.save_checkpoint(trainer.current_step, write)  # the main process's folder is the checkpoint


def write_reward_state(reward, folder: Path) -> None:
    """A reward source's state_dict (rlhf.constraints.ConstrainedReward's multiplier) as REWARD_STATE_FILE; a
    source without one (a reward model, a function, people) writes nothing. Taken when the checkpoint is written,
    the multiplier has moved on every batch scored so far, which is every batch whose prompts the stream's saved
    position has passed (answers scored but dropped or left over are not sampled again either)."""
    state_dict = getattr(reward, "state_dict", None)
    if state_dict is not None:
        (folder / REWARD_STATE_FILE).write_text(json.dumps(state_dict()))


def read_reward_state(reward, folder: Path) -> None:
    """Restore what write_reward_state saved. A checkpoint without the file (a run whose reward kept no state, or
    one written before the multiplier was saved) leaves the reward as it starts, with a line in the log."""
    if getattr(reward, "load_state_dict", None) is None:
        return
    path = folder / REWARD_STATE_FILE
    if not path.exists():
        print(f"{folder.name} holds no {REWARD_STATE_FILE}: the reward's state starts afresh", flush=True)
        return
    state = json.loads(path.read_text())
    reward.load_state_dict(state)
    print(f"reward state restored from {folder.name}: {state}", flush=True)


def save_policy(ctx: StageContext, trainer, tokenizer, base_path: str) -> None:
    """A full model that AutoModelForCausalLM.from_pretrained loads (a LoRA adapter merged into its base), so chat,
    eval and other tools take it as it is; the value head is saved beside it for a later resume. Saved by the main
    process once every rank has finished stepping (under DDP its weights are everyone's; ZeRO-3 / FSDP shards are
    gathered first, a collective every rank enters: None when not sharded). Written in the dtype the base was
    stored in (a bf16 checkpoint gives a bf16 model, not the fp32 master weights: half the disk)."""
    trainer.accelerator.wait_for_everyone()
    weights = trainer.gathered_state_dict()
    if trainer.accelerator.is_main_process:
        trainer.unwrapped_model.save_merged(ctx.final_dir, state_dict=weights, dtype=stored_dtype(base_path))
        tokenizer.save_pretrained(ctx.final_dir)


def heldout_check(ctx: StageContext, db, trainer, tokenizer, chat_template):
    """`check(step)`: every job.heldout_every steps, one answer per held-out prompt from the current policy, scored
    as the final evaluation scores them, or, when people judge the finished model, by the judge that needs nobody
    (evaluation.curve_settings), logged
    as eval/positive_share and eval/reward_mean at that step. None when off or there is nothing to check on (no
    held-out prompts, or several processes: the policy's weights are sharded or replicated across ranks)."""
    from rlhf.evaluation import evaluate_policy
    from rlhf.generation import build_prompt_ids

    job = ctx.job
    prompts = evaluation.heldout_prompts(db, ctx.project)
    if not job.heldout_every or not prompts or trainer.accelerator.num_processes > 1:
        return None
    settings = evaluation.curve_settings(db, ctx.project, dataclasses.replace(job, eval_samples=1))
    reward_fn = evaluation.reward_function(db, settings.reward)
    if reward_fn is None:  # nothing scores answers without people yet
        return None

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
