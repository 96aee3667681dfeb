"""PPO for language models, with the classic TRL API (generate / step / log_stats).

One PPO step on a batch of (query, response, score) rollouts:
  1. forward pass for logprobs and values (policy and reference, no gradients)
  2. rewards = score - beta * KL, per token (score on the last real response token)
  3. advantages by GAE, whitened over real tokens
  4. epochs over shuffled mini-batches: clipped policy loss + vf_coef * clipped value loss
  5. adapt beta (adaptive KL controller) and report stats with TRL's keys
References: Ziegler et al. 2019 (lm-human-preferences), Schulman et al. 2017 (PPO), TRL's PPOTrainer.

Tensor layout: queries are left padded to Q and responses right padded to R, concatenated to (B, Q+R),
so response token j of every row sits in column Q + j and is predicted by the logits at Q + j - 1.
Position ids come from the attention mask, so padding changes no logit. Padding and everything after a
response's first EOS are masked out of every loss, log-prob, KL and statistic.

Several processes (`accelerate launch`, DDP): each rank generates, scores and steps on its own batch_size
rollouts, so the global batch is batch_size * num_processes; gradients are averaged by DDP. What every rank
must agree on is agreed through collectives, the same calls at N=1 (where they do nothing): the running
score moments, whether a mini-batch is skipped or the epochs stop early, beta's update and the returned
stats (TRL 0.11's gather_stats). Only the main process writes metrics and checkpoints. Every public method
that reaches a collective (step, log_stats, save_checkpoint, state_dict) must be called on every rank.
"""
from __future__ import annotations

import contextlib
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from rlhf.configs import PPOConfig
from rlhf.core import (
    RunningMoments,
    entropy_from_logits,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
    pad_sequences,
    response_mask_after_eos,
    stack_stats,
    stats_to_floats,
    trim_response,
    unfinished_share,
)
from rlhf.attention import use_attention
from rlhf.precision import (InheritedMixedPrecisionWarning, autocast_dtype, inherited_mixed_precision,
                            reference_dtype, undo_prepared_autocast, warn_if_no_master_weights)
from rlhf.trainer_setup import enable_gradient_checkpointing
from rlhf.cpu_memory import keep_freed_memory
from rlhf.distributed import (
    all_reduce_gradients,
    gradient_sync,
    prepare_reference,
    sharded_by_caller,
    unwrap_model_for_generation,
)
from rlhf.kl_control import AdaptiveKLController, FixedKLController
from rlhf.losses import (
    gae_advantages,
    group_ids,
    kl_penalty,
    per_token_rewards,
    ppo_policy_loss,
    ppo_value_loss,
    process_scores,
    rloo_advantages,
)
# TRAINER_STATE_FILE: rlhf.ppo named it before the checkpoint code moved out; its importers still find it here.
from rlhf.ppo_checkpoint import TRAINER_STATE_FILE, PPOCheckpointing, plain_values  # noqa: F401
from rlhf.tracking import MetricsCallback, Tracker
from rlhf.value_head import AutoModelForCausalLMWithValueHead, create_reference_model

# Sampling settings under which the sampled tokens are not draws from the policy being trained, so the
# per-token KL estimate log p - log q is biased and can go negative (TRL docs, "why KL goes negative").
# name -> (the value that is safe, test for "unsafe")
_KL_UNSAFE = {
    "do_sample": (True, lambda v: v is not True),
    "top_k": (0, lambda v: v not in (None, 0)),
    "top_p": (1.0, lambda v: v is not None and v < 1.0),
    "temperature": (1.0, lambda v: v is not None and v != 1.0),
    "min_length": (-1, lambda v: v is not None and v > 0),
    "min_new_tokens": (None, lambda v: v is not None and v > 0),
    "num_beams": (1, lambda v: v is not None and v > 1),
    "repetition_penalty": (1.0, lambda v: v is not None and v != 1.0),
    "typical_p": (1.0, lambda v: v is not None and v < 1.0),
    "min_p": (None, lambda v: v is not None and v > 0),
    "no_repeat_ngram_size": (0, lambda v: v is not None and v > 0),
    "bad_words_ids": (None, lambda v: bool(v)),
    "suppress_tokens": (None, lambda v: bool(v)),
}


class KLUnsafeWarning(UserWarning):
    """generate() was asked for sampling settings that bias PPO's KL estimate (top-k, top-p, greedy, ...)."""


def kl_unsafe_settings(generation_kwargs: dict) -> list[str]:
    """'name=value' for each generation setting that biases PPO's KL estimate."""
    return [f"{k}={generation_kwargs[k]!r}" for k, (_, bad) in _KL_UNSAFE.items() if k in generation_kwargs and bad(generation_kwargs[k])]


def policy_kl_too_far(policykl: torch.Tensor | float, target_kl: float) -> bool:
    """TRL 0.11's early-stopping test (PPOTrainer._early_stop): policy KL, the mean of old - new logprobs over
    real tokens (a k1 estimate, so it can be negative), strictly above 1.5 * target_kl."""
    return float(policykl) > 1.5 * target_kl


def default_collator(rows: list[dict]) -> dict[str, list]:
    """TRL's PPO collator: a list of dicts -> a dict of lists (tensors of different lengths stay a list)."""
    return {key: [row[key] for row in rows] for key in rows[0]}


@dataclass
class Rollouts:
    """A batch laid out for the forward passes; per-token tensors are (B, R)."""

    input_ids: torch.Tensor  # (B, Q+R)
    attention_mask: torch.Tensor  # (B, Q+R)
    position_ids: torch.Tensor  # (B, Q+R)
    mask: torch.Tensor  # (B, R) float: 1 for response tokens that count
    response_length: int  # R

    def select(self, idx: torch.Tensor) -> "Rollouts":
        """These rows, without the leading columns that are padding in all of them: the queries are left
        padded to the longest of the whole batch, and a column no selected row attends to changes no output
        (position ids come from the mask), so a mini-batch of shorter queries runs on fewer tokens."""
        attention_mask = self.attention_mask[idx]
        first = int(attention_mask.any(dim=0).int().argmax())  # responses are never empty: a column is real
        return Rollouts(self.input_ids[idx, first:], attention_mask[:, first:], self.position_ids[idx, first:],
                        self.mask[idx], self.response_length)


class PPOTrainer(PPOCheckpointing):
    def __init__(
        self,
        config: PPOConfig,
        model: AutoModelForCausalLMWithValueHead,
        ref_model: AutoModelForCausalLMWithValueHead | None = None,
        tokenizer=None,
        dataset=None,
        optimizer: torch.optim.Optimizer | None = None,
        data_collator: Callable | None = None,
        lr_scheduler=None,
        callback: MetricsCallback | None = None,
        accelerator=None,
        num_shared_layers: int | None = None,
        training_data_collator: Callable | None = None,
    ) -> None:
        """TRL 0.11's arguments, plus `callback` (metrics sink) and `accelerator` (a prepared one to share).

        num_shared_layers: as TRL, the policy's parameters before layer `num_shared_layers` (embeddings
        included) are frozen and so stay equal to the reference's (create_reference_model); ignored with a
        warning when ref_model is given. training_data_collator: TRL pads query+response with it for the
        forward passes; here rollouts have a fixed layout (left-padded queries, right-padded responses), so it
        is ignored with a warning.
        """
        if tokenizer is None:
            raise ValueError("PPOTrainer: tokenizer is required (for padding and EOS ids)")
        self.config, self.tokenizer = config, tokenizer
        # 1. the accelerator and the trackers that log through it
        self.accelerator = self._start_accelerator(accelerator)
        # 2. seeds: the shuffling generator, and each rank's global RNG for sampling
        self._seed()
        # 3. the token ids that pad a batch and end a response
        self._set_token_ids(tokenizer, model)
        # 4. precision: the attention kernel, the autocast dtype and (fp16) the gradient scaler
        self._set_precision(model)
        # 5. the reference policy: given, the adapter-free policy under peft, or a frozen copy made now
        copied_reference = ref_model is None and not model.is_peft_model
        self._warn_about_ignored_arguments(copied_reference, num_shared_layers, training_data_collator)
        if copied_reference:  # before prepare(): accelerate patches model.forward
            ref_model = create_reference_model(model, num_shared_layers=num_shared_layers,
                                               dtype=reference_dtype(self.autocast_dtype))
        # 6. the policy's training settings, applied after the copy (the reference never runs a backward pass)
        self._prepare_policy_for_training(model)
        # 7. optimizer and data, then accelerate's prepare (DDP, device placement)
        self.optimizer = optimizer or _adam([p for p in model.parameters() if p.requires_grad], config.learning_rate)
        self.lr_scheduler = lr_scheduler
        dataloader = self._dataloader(dataset, data_collator)
        self._prepare(model, dataloader, own_accelerator=accelerator is None)
        # 8. the reference placed (and under ZeRO-3 / FSDP sharded) as the policy is
        self.ref_model = self._place_reference(model, ref_model, copied_reference)
        # 9. the KL controller, the running score moments and the metrics tracker
        self._start_bookkeeping(callback)

    # ---- the constructor's steps, in order ------------------------------------------------------------
    def _start_accelerator(self, accelerator):
        """The Accelerator given, or our own. bf16 is our own autocast (_autocast), not Accelerator(mixed_precision=
        ...): accelerate's state is a process-wide singleton, so a second trainer with another precision in the same
        process would fail. log_with="wandb" (and "mlflow", "trackio") logs through accelerate's tracker, as TRL 0.11
        does; tensorboard goes through our own Tracker (log_dir). A missing tracker package fails here, naming it,
        not at the first log."""
        from accelerate import Accelerator

        config = self.config
        config.check_trackers()
        self.uses_accelerate_tracker = config.log_with not in (None, "tensorboard")
        accelerator = accelerator or Accelerator(log_with=config.log_with if self.uses_accelerate_tracker else None,
                                                 **config.accelerator_kwargs)
        if self.uses_accelerate_tracker:
            accelerator.init_trackers(config.tracker_project_name, config=plain_values(config),
                                      init_kwargs=config.tracker_kwargs)
        if config.keep_freed_memory and accelerator.device.type == "cpu":
            keep_freed_memory()
        return accelerator

    def _seed(self) -> None:
        """Shuffling draws from self.generator; sampling in generate() uses torch's global RNG (transformers offers no
        generator argument), seeded here once. Both are in state_dict() for resuming. Each rank seeds the global RNG
        with seed + rank, so two ranks given the same prompts still sample different answers (rank 0 of N is the
        single-process run)."""
        seed = self.config.seed
        self.generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed + self.accelerator.process_index)
        random.seed(seed + self.accelerator.process_index)

    def _set_token_ids(self, tokenizer, model) -> None:
        """pad_token_id (the EOS when the tokenizer has no pad) and every id that ends a response: the tokenizer's
        EOS and the model's generation_config EOS ids."""
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_token_id = tokenizer.eos_token_id
        configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        configured = configured if isinstance(configured, (list, tuple)) else [configured]
        self.eos_token_ids = [i for i in dict.fromkeys([self.eos_token_id, *configured]) if isinstance(i, int)]
        if self.pad_token_id is None:
            raise ValueError("PPOTrainer: the tokenizer has neither a pad nor an EOS token")

    def _set_precision(self, model) -> None:
        """bf16 autocast, or fp16 with a gradient scaler on a GPU without native bf16 (the scaler keeps small fp16
        gradients from flushing to zero); autocast_dtype None: accelerate's own mixed precision, if it was launched
        with one. A trainable weight in half precision (no fp32 master) is warned about."""
        self.is_peft = model.is_peft_model
        use_attention(model.pretrained_model, self.config.attn_implementation, self.accelerator.device)
        warn_if_no_master_weights(model)
        self.autocast_dtype = autocast_dtype(self.config.bf16, self.accelerator.device.type)
        fp16 = self.autocast_dtype == torch.float16
        self.scaler = torch.amp.GradScaler(self.accelerator.device.type) if fp16 else None

    @staticmethod
    def _warn_about_ignored_arguments(copied_reference: bool, num_shared_layers, training_data_collator) -> None:
        if num_shared_layers is not None and not copied_reference:
            warnings.warn("PPOTrainer: num_shared_layers is ignored when ref_model is given or the model is a peft "
                          "model (as in TRL): no layers are shared", UserWarning, stacklevel=3)
        if training_data_collator is not None:
            warnings.warn("PPOTrainer: training_data_collator is ignored: TRL pads query+response with it for the "
                          "forward passes, here rollouts are laid out as left-padded queries + right-padded responses "
                          "(same logits, no padding in any loss); data_collator= collates the dataset's rows",
                          UserWarning, stacklevel=3)

    def _prepare_policy_for_training(self, model) -> None:
        """Gradient checkpointing, and under RLOO a frozen value head: RLOO trains no critic, so the head gets no
        gradient, and under DDP a parameter that takes part in the forward pass but not in the loss stalls the
        gradient all-reduce (its weights are still saved, so a later GAE run can start from them)."""
        if self.config.gradient_checkpointing:
            enable_gradient_checkpointing(model.pretrained_model)
        if self.config.advantage_estimator == "rloo":
            model.v_head.requires_grad_(False)

    def _dataloader(self, dataset, data_collator) -> DataLoader | None:
        """TRL's dataloader over `dataset` (None without one): shuffled by its own seeded generator, whole batches."""
        self.dataset = dataset
        self.data_collator = data_collator or default_collator
        self.data_generator = torch.Generator().manual_seed(self.config.seed)
        if dataset is None:
            return None
        return DataLoader(dataset, batch_size=self.config.batch_size, shuffle=True, drop_last=True,
                          collate_fn=self.data_collator, generator=self.data_generator)

    def _prepare(self, model, dataloader, own_accelerator: bool) -> None:
        """self.model, self.optimizer, self.dataloader through accelerator.prepare. A model the caller sharded with
        torch's FSDP / fully_shard (accelerate offers FSDP on GPUs only) is used as given: preparing it again would
        wrap it in DDP. Its optimizer must be built after the wrapping."""
        prepare_model = not sharded_by_caller(model)
        prepared = self.accelerator.prepare(*([model] if prepare_model else []), self.optimizer,
                                            *([dataloader] if dataloader is not None else []))
        prepared = list(prepared) if isinstance(prepared, tuple) else [prepared]
        self.model = prepared.pop(0) if prepare_model else model
        self.optimizer = prepared.pop(0)
        self.inherited_precision = inherited_mixed_precision(self.accelerator) if own_accelerator else None
        if self.inherited_precision is not None:
            self._undo_inherited_precision(prepare_model)
        self.dataloader = prepared.pop(0) if dataloader is not None else None

    def _undo_inherited_precision(self, model_was_prepared: bool) -> None:
        """An Accelerator of ours in a process where an earlier trainer set mixed precision (accelerate's state is
        one per process) would run every forward in that precision, whatever config.bf16 says: give the model back
        its own forward and keep to the config."""
        own = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.autocast_dtype, "no")
        if own != self.inherited_precision:
            warnings.warn(f"PPOTrainer: accelerate's state in this process has mixed_precision="
                          f"{self.inherited_precision} from an earlier trainer; this one computes in {own} as its "
                          f"config says (bf16={self.config.bf16})", InheritedMixedPrecisionWarning, stacklevel=4)
        if model_was_prepared:
            undo_prepared_autocast(self.model)
        # an inherited fp16 state also brought accelerate's loss scaler; this trainer keeps its own (or none)
        self.accelerator.scaler = None
        if hasattr(self.optimizer, "scaler"):
            self.optimizer.scaler = None

    def _place_reference(self, model, ref_model, copied_reference: bool):
        """The reference frozen, with the training attention kernel, placed by accelerate; None (peft: the policy
        with its adapter off) stays None."""
        if copied_reference and isinstance(self.model, torch.nn.parallel.DistributedDataParallel):
            # DDP started every rank from rank 0's weights; the copy was made from this rank's own.
            ref_model.load_state_dict(model.state_dict())
        if ref_model is None:
            return None
        use_attention(ref_model.pretrained_model, self.config.attn_implementation, self.accelerator.device)
        ref_model.requires_grad_(False)
        ref_model = prepare_reference(self.accelerator, ref_model)
        if self.inherited_precision is not None:
            undo_prepared_autocast(ref_model)  # or the reference alone would run in the earlier trainer's precision
        return ref_model

    def _start_bookkeeping(self, callback) -> None:
        config = self.config
        if config.adap_kl_ctrl:
            self.kl_ctl = AdaptiveKLController(config.init_kl_coef, config.target, config.horizon, config.kl_coef_min)
        else:
            self.kl_ctl = FixedKLController(config.init_kl_coef)
        self.running = RunningMoments()
        self.current_step = 0
        self.last_stats: dict[str, float] = {}  # the latest step()'s stats, for save_pretrained's model card
        # Every rank computes the same stats (step() gathers them); one writes them.
        self.tracker = Tracker.create(config.log_dir, config.tensorboard, callback,
                                      enabled=self.accelerator.is_main_process)

    def _autocast(self):
        if self.autocast_dtype is not None:
            return torch.autocast(device_type=self.accelerator.device.type, dtype=self.autocast_dtype)
        if self.inherited_precision is not None:
            return contextlib.nullcontext()  # an earlier trainer's precision, not this run's: fp32
        return self.accelerator.autocast()  # whatever `accelerate launch --mixed_precision` asked for

    @property
    def unwrapped_model(self) -> AutoModelForCausalLMWithValueHead:
        return self.accelerator.unwrap_model(self.model)

    # ---- generation ---------------------------------------------------------------------------------
    def generate(
        self,
        query_tensor: torch.Tensor | Sequence[torch.Tensor],
        length_sampler: Callable[[], int] | None = None,
        batch_size: int = 16,
        return_prompt: bool = True,
        generate_ref_response: bool = False,
        remove_padding: bool = True,
        allow_kl_unsafe: bool = False,
        **generation_kwargs,
    ):
        """Sample responses, batched with left padding. A 1-D query gives a (1, L) tensor, a list a list.

        Sampling defaults to the untempered full distribution (do_sample, top_k=0, top_p=1, temperature=1);
        settings that bias the KL estimate give a KLUnsafeWarning (as TRL's docs warn), unless allow_kl_unsafe=True.
        """
        kwargs = self._generation_kwargs(generation_kwargs, allow_kl_unsafe)
        single = isinstance(query_tensor, torch.Tensor) and query_tensor.dim() == 1
        queries = [query_tensor] if single else list(query_tensor)
        # ZeRO-3 / FSDP: the shards gathered once around generation (every rank must call generate() alike).
        with unwrap_model_for_generation(self.model, self.accelerator) as policy:
            responses = self._generate_batched(policy, queries, length_sampler, batch_size, return_prompt,
                                               remove_padding, kwargs)
        ref_responses = None
        if generate_ref_response:
            ref, context = self._reference()
            with context:
                ref_responses = self._generate_batched(ref, queries, length_sampler, batch_size,
                                                       return_prompt, remove_padding, kwargs)
        if single:
            responses = responses[0].unsqueeze(0)
            ref_responses = ref_responses[0].unsqueeze(0) if ref_responses is not None else None
        return (responses, ref_responses) if generate_ref_response else responses

    def _generation_kwargs(self, generation_kwargs: dict, allow_kl_unsafe: bool) -> dict:
        kwargs = {k: safe for k, (safe, _) in _KL_UNSAFE.items() if safe is not None and k in
                  ("do_sample", "top_k", "top_p", "temperature")}
        kwargs.update(generation_kwargs)
        kwargs.setdefault("pad_token_id", self.pad_token_id)
        if self.eos_token_ids:
            kwargs.setdefault("eos_token_id", self.eos_token_ids)
        unsafe = kl_unsafe_settings(kwargs)
        if unsafe and not allow_kl_unsafe:
            warnings.warn(
                f"generate(): {', '.join(unsafe)} samples tokens from a distribution other than the policy's, "
                "so PPO's KL estimate is biased and can go negative (TRL docs: 'why KL goes negative'). Use "
                "do_sample=True, top_k=0, top_p=1.0, temperature=1.0, no min length (allow_kl_unsafe=True: no warning).",
                KLUnsafeWarning, stacklevel=3)
        return kwargs

    @torch.no_grad()
    def _generate_batched(self, model, queries, length_sampler, batch_size, return_prompt, remove_padding, kwargs):
        device = self.accelerator.device
        was_training = model.training
        model.eval()
        outputs = []
        for start in range(0, len(queries), batch_size):
            chunk = [q.to(device) for q in queries[start : start + batch_size]]
            if length_sampler is not None:
                kwargs = {**kwargs, "max_new_tokens": length_sampler()}
            input_ids = pad_sequences(chunk, self.pad_token_id, side="left").to(device)  # (b, Q)
            lengths = torch.tensor([len(q) for q in chunk], device=device)
            positions = torch.arange(input_ids.shape[1], device=device)
            attention_mask = (positions >= input_ids.shape[1] - lengths[:, None]).long()  # (b, Q)
            with self._autocast():
                generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            for query, row in zip(chunk, generated[:, input_ids.shape[1] :]):
                response = trim_response(row, self.eos_token_ids, self.pad_token_id) if remove_padding else row
                outputs.append(torch.cat([query, response]) if return_prompt else response)
        model.train(was_training)
        return outputs

    def _reference(self):
        """(model, context) computing the reference policy: the ref model, or ours with the adapter off."""
        if self.ref_model is not None:
            return self.ref_model, contextlib.nullcontext()
        return self.model, self.unwrapped_model.disable_adapter()

    # ---- the PPO step -------------------------------------------------------------------------------
    def step(
        self,
        queries: list[torch.Tensor],
        responses: list[torch.Tensor],
        scores: list[torch.Tensor],
        response_masks: list[torch.Tensor] | None = None,
        old_logprobs: list[torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """One PPO step on batch_size rollouts; returns TRL's stats as floats.

        `old_logprobs` (from behaviour_logprobs, one 1-D tensor per response) are the response tokens'
        log-probs under the policy that sampled them, when that is an older policy than the current one (a
        batch generated while the previous one was being rated): they become the PPO ratio's denominator, so
        the ratio corrects for the staleness. Values, reference log-probs and the KL penalty are still
        computed now. Without them, the current policy is taken as the behaviour policy (TRL's step).
        """
        t0 = time.perf_counter()
        raw_scores = self._check_inputs(queries, responses, scores, response_masks)
        if old_logprobs is not None:
            self._check_old_logprobs(old_logprobs, responses)  # before _process_scores updates running stats
        scores_t = self._process_scores(raw_scores)
        rollouts = self._layout(queries, responses, response_masks)
        mask = rollouts.mask

        # 1. forward pass for logprobs and values
        t = time.perf_counter()
        current_logprobs, values, ref_logprobs, kl, entropy = self._rollout_forward(rollouts)
        behaviour = current_logprobs
        if old_logprobs is not None:
            behaviour = self._behaviour_layout(old_logprobs, rollouts)
        forward_time = time.perf_counter() - t

        # 2. rewards = score - beta * KL
        rewards, non_score = per_token_rewards(scores_t, kl, mask, self.kl_ctl.value)
        if self.config.whiten_rewards:
            rewards = masked_whiten(rewards, mask, shift_mean=False)

        # 3. advantages: GAE with the value head, or RLOO's leave-one-out baseline over answers to one prompt
        if self.config.advantage_estimator == "rloo":
            sequence_rewards = rewards.sum(dim=1)  # score - beta * KL summed over the answer
            # Groups are the equal queries of this rank's batch only: with several processes each rank must
            # generate whole groups (all answers_per_prompt answers to a prompt on one rank; the rule is
            # PPOConfig.prompts_per_batch); answers to one prompt split over ranks would each lose the others as
            # their baseline. Whitening below is per rank too, as in TRL.
            groups = group_ids(queries).to(sequence_rewards.device)
            advantages = rloo_advantages(sequence_rewards, groups)[:, None] * mask  # (B, R), one value per answer
            returns = values  # no critic is trained: its loss is left out
        else:
            advantages, returns = gae_advantages(values, rewards, mask, self.config.gamma, self.config.lam)
        advantages = masked_whiten(advantages, mask)

        # 4. epochs over mini-batches
        t = time.perf_counter()
        train_stats = self._train_epochs(rollouts, behaviour, values, advantages, returns)
        optimize_time = time.perf_counter() - t

        # 5. adapt beta, report
        stats = self._record_stats(raw_scores, scores_t, mask, current_logprobs, kl, non_score, entropy, values,
                                   returns, advantages, train_stats)
        if old_logprobs is not None:
            # How far the policy moved since it sampled this batch: sequence-level log p_now - log p_behaviour.
            stats["ppo/policy/staleness_kl"] = float(((current_logprobs - behaviour) * mask).sum(1).mean())
        # Answers that never reached their EOS were cut at the answer length: the policy learnt on them as they are.
        stats["tokens/cut_share"] = unfinished_share(responses, self.eos_token_ids)
        stats.update({"time/ppo/forward_pass": forward_time, "time/ppo/optimize_step": optimize_time,
                      "time/ppo/total": time.perf_counter() - t0})
        stats = self.gather_stats(stats)
        # beta moves with the KL of the global batch, the same on every rank.
        self.kl_ctl.update(stats["objective/kl"], self.config.batch_size * self.accelerator.num_processes)
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.current_step += 1
        self.last_stats = stats
        return stats

    def gather_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Each stat averaged over ranks (TRL 0.11's gather_stats: all_reduce SUM / world size), in one
        all-reduce; every rank has the same keys, in sorted order. Score stats are exact already (_record_stats
        gathers the scores); averaging them again leaves them unchanged."""
        if self.accelerator.num_processes == 1:
            return stats
        keys = sorted(stats)
        values = torch.tensor([float(stats[k]) for k in keys], dtype=torch.float64, device=self.accelerator.device)
        return dict(zip(keys, self.accelerator.reduce(values, "mean").tolist()))

    def behaviour_logprobs(self, queries: list[torch.Tensor], responses: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each response's token log-probs under the current policy, one 1-D tensor per response (zeros after
        its first EOS): call it right after generate() for a batch that step() will see only after other
        updates, and pass the result as step(old_logprobs=...)."""
        for i, (q, r) in enumerate(zip(queries, responses)):
            if q.dim() != 1 or len(q) == 0 or r.dim() != 1 or len(r) == 0:
                raise ValueError(f"behaviour_logprobs(): queries[{i}] and responses[{i}] must be non-empty 1-D tensors")
        rollouts = self._layout(queries, responses, None)
        logprobs = self._rollout_forward(rollouts, with_reference=False)[0]
        return [logprobs[i, : len(r)].cpu() for i, r in enumerate(responses)]

    @staticmethod
    def _check_old_logprobs(old_logprobs, responses) -> None:
        if len(old_logprobs) != len(responses):
            raise ValueError(f"step(): old_logprobs has {len(old_logprobs)} items for {len(responses)} responses")
        for i, (lp, r) in enumerate(zip(old_logprobs, responses)):
            if lp.dim() != 1 or len(lp) != len(r):
                raise ValueError(f"step(): old_logprobs[{i}] has shape {tuple(lp.shape)}, responses[{i}] {tuple(r.shape)}")

    def _behaviour_layout(self, old_logprobs, rollouts: Rollouts) -> torch.Tensor:
        """step()'s old_logprobs list -> (B, R) like the forward pass's, masked the same way."""
        padded = pad_sequences([lp.float() for lp in old_logprobs], 0, side="right")  # (B, R)
        return padded.to(self.accelerator.device) * rollouts.mask

    def _check_inputs(self, queries, responses, scores, response_masks) -> torch.Tensor:
        n = self.config.batch_size
        for name, value in (("queries", queries), ("responses", responses), ("scores", scores)):
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"step(): {name} must be a list of tensors, got {type(value).__name__}")
            if len(value) != n:
                raise ValueError(f"step(): {name} has {len(value)} items, config.batch_size is {n}")
        if response_masks is not None and len(response_masks) != n:
            raise ValueError(f"step(): response_masks has {len(response_masks)} items, config.batch_size is {n}")
        for i, (q, r) in enumerate(zip(queries, responses)):
            if q.dim() != 1 or len(q) == 0:
                raise ValueError(f"step(): queries[{i}] must be a non-empty 1-D tensor of token ids, shape {tuple(q.shape)}")
            if r.dim() != 1 or len(r) == 0:
                raise ValueError(f"step(): responses[{i}] must be a non-empty 1-D tensor of token ids, shape {tuple(r.shape)}")
        out = []
        for i, s in enumerate(scores):
            s = torch.as_tensor(s, dtype=torch.float32)
            if s.numel() != 1:
                raise ValueError(f"step(): scores[{i}] must be a scalar, shape {tuple(s.shape)}")
            if not torch.isfinite(s).all():
                raise ValueError(f"step(): scores[{i}] is {float(s)}; scores must be finite")
            out.append(s.reshape(()))
        return torch.stack(out).to(self.accelerator.device)

    def _process_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """Running scaling/normalisation and clipping (TRL's use_score_scaling/use_score_norm/score_clip)."""
        if len(scores) > 1 and bool((scores == scores[0]).all()):
            warnings.warn(
                f"All {len(scores)} scores in this batch are equal ({float(scores[0]):g}): after whitening, "
                "the advantages come only from the KL penalty, so the policy learns nothing from the reward.",
                stacklevel=3,
            )
        std = None
        if self.config.use_score_scaling:
            self.running.update(scores, reduce_sum=lambda t: self.accelerator.reduce(t, "sum"))
            std = self.running.std
        return process_scores(scores, self.running.mean, std, norm=self.config.use_score_norm,
                              clip=self.config.score_clip)

    def _layout(self, queries, responses, response_masks) -> Rollouts:
        device = self.accelerator.device
        q = pad_sequences([x.long() for x in queries], self.pad_token_id, side="left")  # (B, Q)
        r = pad_sequences([x.long() for x in responses], self.pad_token_id, side="right")  # (B, R)
        q_len = torch.tensor([len(x) for x in queries])
        r_len = torch.tensor([len(x) for x in responses])
        q_mask = (torch.arange(q.shape[1]) >= q.shape[1] - q_len[:, None]).long()
        r_in_length = (torch.arange(r.shape[1]) < r_len[:, None]).long()
        # Cut after the first EOS within each response's own length (pad may equal EOS: the length decides).
        r_mask = r_in_length * response_mask_after_eos(r, self.eos_token_ids, None)
        attention_mask = torch.cat([q_mask, r_mask], dim=1)  # (B, Q+R)
        loss_mask = r_mask
        if response_masks is not None:
            loss_mask = loss_mask * pad_sequences([m.long() for m in response_masks], 0, side="right")
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        return Rollouts(torch.cat([q, r], dim=1).to(device), attention_mask.to(device), position_ids.to(device),
                        loss_mask.float().to(device), r.shape[1])

    def _forward(self, model, rollouts: Rollouts, with_values: bool = True
                 ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(logprobs (b, R), values (b, R), logits (b, R, V)) of the response tokens; values None without them
        (the reference's pass: its value head is not run).

        Only the last R + 1 positions go through the LM head (logits_to_keep): queries need none.
        """
        R = rollouts.response_length
        with self._autocast():
            logits, _, values = model(input_ids=rollouts.input_ids, attention_mask=rollouts.attention_mask,
                                      position_ids=rollouts.position_ids, logits_to_keep=R + 1,
                                      with_values=with_values)
        logits = logits[:, :-1]  # position Q-1+j predicts response token j
        values = values[:, :-1].float() if values is not None else None
        return logprobs_from_logits(logits, rollouts.input_ids[:, -R:]), values, logits

    @torch.no_grad()
    def _rollout_forward(self, rollouts: Rollouts, with_reference: bool = True):
        """Old logprobs, values, reference logprobs, per-token KL and entropy for the whole batch, in chunks
        (only logprobs and values without the reference)."""
        self.model.eval()
        outs = []
        size, n = self.config.rollout_forward_batch_size, len(rollouts.input_ids)
        for start in range(0, n, size):
            chunk = rollouts.select(torch.arange(start, min(start + size, n)))
            logprobs, values, logits = self._forward(self.model, chunk)
            if not with_reference:
                outs.append((logprobs, values))
                continue
            ref_model, ref_context = self._reference()
            with ref_context:
                ref_logprobs, _, ref_logits = self._forward(ref_model, chunk, with_values=False)
            kl = kl_penalty(logprobs, ref_logprobs, self.config.kl_penalty, logits, ref_logits)
            outs.append((logprobs, values, ref_logprobs, kl, entropy_from_logits(logits)))
        self.model.train()
        return tuple(torch.cat(parts) * rollouts.mask for parts in zip(*outs))

    def _train_epochs(self, rollouts, old_logprobs, old_values, advantages, returns) -> list[dict]:
        cfg = self.config
        stats, early_stopped, optimizer_steps = [], False, 0
        self.model.train()
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(cfg.batch_size, generator=self.generator).to(self.accelerator.device)
            for start in range(0, cfg.batch_size, cfg.backward_batch_size):
                last = start + cfg.backward_batch_size - cfg.mini_batch_size
                synced = True
                for mb_start in range(start, start + cfg.backward_batch_size, cfg.mini_batch_size):
                    idx = order[mb_start : mb_start + cfg.mini_batch_size]
                    # DDP all-reduces the gradients in the last micro-batch's backward only (no_sync before it).
                    with gradient_sync(self.accelerator, self.model, sync=mb_start == last):
                        mb_stats = self._train_minibatch(rollouts.select(idx), old_logprobs[idx], old_values[idx],
                                                         advantages[idx], returns[idx])
                    stats.append(mb_stats)
                    if not bool(mb_stats["skipped"]):
                        synced = mb_start == last
                if not synced:  # the last micro-batch was skipped: the gradients before it were never averaged
                    all_reduce_gradients(self.accelerator, self.model)
                if self.scaler is not None:
                    self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
                if cfg.max_grad_norm is not None:
                    self.accelerator.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                if self.scaler is not None:
                    self.scaler.step(self.optimizer)  # skipped when a gradient overflowed; the scale then halves
                    self.scaler.update()
                else:
                    self.optimizer.step()
                self.optimizer.zero_grad()
                optimizer_steps += 1
            # TRL 0.11's early stopping, at the epoch level: the last mini-batch's policy KL, mean over ranks so
            # every rank stops together. The epoch's optimizer steps are all taken, so no partial gradient is left.
            policykl = stats[-1]["policy/policykl"]
            if cfg.early_stopping and policy_kl_too_far(self._mean_over_ranks(policykl), cfg.target_kl):
                early_stopped = True
                break
        for s in stats:
            s["early_stopped"] = torch.tensor(float(early_stopped))
            s["optimizer_steps"] = torch.tensor(float(optimizer_steps))
        return stats

    def _train_minibatch(self, mb: Rollouts, old_logprobs, old_values, advantages, returns) -> dict:
        cfg = self.config
        logprobs, vpreds, logits = self._forward(self.model, mb)
        pg_loss, pg_stats = ppo_policy_loss(logprobs, old_logprobs, advantages, mb.mask, cfg.cliprange)
        vf_loss, vf_stats = ppo_value_loss(vpreds, old_values, returns, mb.mask, cfg.cliprange_value)
        loss = pg_loss + cfg.vf_coef * vf_loss if cfg.advantage_estimator == "gae" else pg_loss
        # A huge ratio means the new policy is far from the one that sampled: the update would be garbage.
        # Decided on the mean over ranks: a rank that skipped backward() alone would stall DDP's all-reduce.
        skipped = bool(self._mean_over_ranks(pg_stats["ratio"]) > cfg.ratio_threshold)
        if not skipped:
            scaled = loss if self.scaler is None else self.scaler.scale(loss)
            self.accelerator.backward(scaled / cfg.gradient_accumulation_steps)
        with torch.no_grad():
            return {
                "loss/policy": pg_loss.detach(), "loss/value": vf_loss.detach(), "loss/total": loss.detach(),
                "policy/entropy": masked_mean(entropy_from_logits(logits), mb.mask),
                "policy/approxkl": pg_stats["approxkl"], "policy/clipfrac": pg_stats["clipfrac"],
                "policy/ratio": pg_stats["ratio"],
                # TRL 0.11's names: mean log(old / new) and the mean of the whitened advantages.
                "policy/policykl": masked_mean(old_logprobs - logprobs, mb.mask),
                "policy/advantages_mean": masked_mean(advantages, mb.mask),
                "val/vpred": masked_mean(vpreds, mb.mask), "val/error": vf_stats["error"],
                "val/clipfrac": vf_stats["clipfrac"], "skipped": torch.tensor(float(skipped)),
            }

    def _mean_over_ranks(self, value: torch.Tensor) -> torch.Tensor:
        return self.accelerator.reduce(value.detach().float().reshape(1).to(self.accelerator.device), "mean")[0]

    def _record_stats(self, raw_scores, scores, mask, old_logprobs, kl, non_score, entropy, values, returns,
                      advantages, train_stats) -> dict[str, float]:
        # Sequence-level sums averaged over the batch, as TRL reports objective/kl and objective/entropy.
        mean_kl = (kl * mask).sum(1).mean()
        # The scores of every rank's batch: their std over the global batch is not the mean of ranks' stds.
        raw_scores = self.accelerator.gather(raw_scores)
        scores = self.accelerator.gather(scores)
        stats = {
            "objective/kl": mean_kl,
            "objective/kl_coef": self.kl_ctl.value,
            "objective/entropy": (-old_logprobs * mask).sum(1).mean(),
            # Per token, as TRL 0.11 reports it (objective/kl above is the per-sequence sum).
            "ppo/mean_non_score_reward": masked_mean(non_score, mask),
            "ppo/mean_scores": raw_scores.mean(),
            "ppo/std_scores": raw_scores.std() if len(raw_scores) > 1 else torch.tensor(0.0),
            "ppo/mean_processed_scores": scores.mean(),
            "ppo/returns/mean": masked_mean(returns, mask),
            "ppo/returns/var": masked_var(returns, mask) if mask.sum() > 1 else torch.tensor(0.0),
            "ppo/val/mean": masked_mean(values, mask),
            "ppo/val/var": masked_var(values, mask) if mask.sum() > 1 else torch.tensor(0.0),
            "ppo/token_entropy": masked_mean(entropy, mask),
            "ppo/learning_rate": self.optimizer.param_groups[0]["lr"],
            "tokens/responses_len_mean": mask.sum(1).mean(),
        }
        for key, value in stack_stats(train_stats).items():
            stats[f"ppo/{key}"] = value.mean()
        out = stats_to_floats(stats)
        out["ppo/skipped"] = float(sum(float(s["skipped"]) for s in train_stats))
        return out

    # ---- logging ------------------------------------------------------------------------------------
    def log_stats(self, stats: dict, batch: dict, rewards, columns_to_log: Sequence[str] = ("query", "response")) -> None:
        """Add env/reward_mean and env/reward_std, then write every sink (TensorBoard, CSV/JSONL, callback)."""
        from accelerate.utils import gather_object

        rewards_t = torch.stack([torch.as_tensor(r, dtype=torch.float32).reshape(()) for r in rewards])
        # Every rank's rewards and samples (TRL gathers the rewards); the main process writes them.
        rewards_t = self.accelerator.gather(rewards_t.to(self.accelerator.device)).cpu()
        logs = dict(stats)
        logs["env/reward_mean"] = float(rewards_t.mean())
        logs["env/reward_std"] = float(rewards_t.std()) if len(rewards_t) > 1 else 0.0
        columns = [c for c in columns_to_log if c in batch]
        samples = gather_object([{c: batch[c][i] for c in columns} for i in range(len(rewards))])
        for row, reward in zip(samples, rewards_t.tolist()):
            row["reward"] = reward
        # current_step was already advanced by step(): the stats belong to step number current_step.
        numbers = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
        self.tracker.log(self.current_step, numbers, samples)
        if self.uses_accelerate_tracker:
            self.accelerator.log(numbers, step=self.current_step)  # the main process only, inside accelerate


def _adam(params: list, lr: float) -> torch.optim.Optimizer:
    """Adam, fused where torch has a fused kernel for the device: on CPU the default per-tensor loop is
    ~10x slower for a 135M model, and PPO takes ppo_epochs * batch / backward_batch optimizer steps per step."""
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr)
