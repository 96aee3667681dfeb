"""Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath) on transformers.Trainer, with TRL 1.16's API.

    def reward_len(completions, **kwargs):
        return [-abs(20 - len(completion)) for completion in completions]

    trainer = GRPOTrainer("default", reward_funcs=reward_len, args=GRPOConfig(output_dir="grpo"), train_dataset=rows)
    trainer.train(); trainer.save_model()

Every `steps_per_generation * num_iterations` micro-steps the trainer samples `num_generations` answers to each
prompt of a generation batch, scores them with the reward functions, and turns the rewards into advantages within
each prompt's group; the batch is then cut into `steps_per_generation` micro-batches that train the policy with a
clipped surrogate loss (and, with beta > 0, a k3 KL term to the frozen reference), `num_iterations` times over.
The math lives in rlhf/losses.py. RLOOTrainer (rlhf/rloo.py) is this trainer with other advantages and loss.

Rows are TRL's: a "prompt" column, standard (text) or conversational (a list of messages); the other columns reach
the reward functions as keyword arguments.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils.data import Sampler

from rlhf.base_trainer import BaseTrainer, check_prompt_columns
from rlhf.core import entropy_from_logits, selective_log_softmax
from rlhf.configs import MAX_NEW_TOKENS
from rlhf.data import is_conversational, pad_token_lists, render_prompt_completion, tokenize_for_reward
from rlhf.distributed import unwrap_model_for_generation
from rlhf.generation import left_pad
from rlhf.loading import DEFAULT_POLICY, load_tokenizer, resolve_model_path
from rlhf.losses import (
    GRPO_LOSS_TYPES,
    aggregate_token_losses,
    clipped_surrogate,
    group_relative_advantages,
    k3_kl,
    nan_std,
)
from rlhf.peft_utils import is_peft_model, merge_adapter
from rlhf.precision import copy_in_dtype, reference_dtype
from rlhf.samplers import RepeatSampler
from rlhf.trainer_config import TrainerConfig, refuse_trl_only_values, trl_only
from rlhf.trainer_setup import disable_dropout, freeze_reference, prepare_model

RewardFunc = Any  # a callable f(prompts, completions, **kwargs) -> list[float | None], a reward model, or its path


@dataclass
class OnlineRLConfig(TrainerConfig):
    """The fields GRPOConfig and RLOOConfig share (TRL 1.16's names and defaults, except where noted)."""

    model_name_or_path: str = field(
        default=DEFAULT_POLICY, metadata={"help": "Policy when the trainer is given no model: 'default', a folder, an adapter folder."})
    learning_rate: float = field(default=1e-6, metadata={"help": "AdamW learning rate (TRL's default 1e-6)."})
    logging_steps: float = field(default=10, metadata={"help": "Log metrics every this many optimizer steps."})
    disable_dropout: bool = field(
        default=False, metadata={"help": "Set every dropout probability to 0 (same log-probs for the same input)."})
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Keep False: the dataset's other columns go to the reward functions."})
    num_generations: int = field(
        default=8, metadata={"help": "Answers sampled per prompt (a group); the generation batch must hold whole groups."})
    num_generations_eval: int | None = field(
        default=None, metadata={"help": "Answers per prompt during evaluation (None: num_generations)."})
    max_completion_length: int = field(default=512, metadata={"help": "Tokens generated per answer at most."})
    shuffle_dataset: bool = field(default=True, metadata={"help": "Shuffle the training prompts."})
    generation_batch_size: int | None = field(
        default=None, metadata={"help": "Answers generated at once (None: per_device_train_batch_size * processes * steps_per_generation)."})
    steps_per_generation: int | None = field(
        default=None, metadata={"help": "Micro-batches cut from one generation batch (None: gradient_accumulation_steps)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1.0: off)."})
    top_k: int = field(default=0, metadata={"help": "Keep the k most likely tokens (0: off)."})
    min_p: float | None = field(default=None, metadata={"help": "Minimum token probability relative to the most likely one (None: off)."})
    repetition_penalty: float = field(default=1.0, metadata={"help": "Penalty on tokens already in the prompt or answer (1.0: off)."})
    generation_kwargs: dict | None = field(
        default=None, metadata={"help": "More keyword arguments for generate(); they override the settings above."})
    chat_template_kwargs: dict | None = field(
        default=None, metadata={"help": "Keyword arguments for apply_chat_template on conversational prompts."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient to the reference model (0: no reference is kept)."})
    num_iterations: int = field(default=1, metadata={"help": "Passes over each generation batch (mu in the GRPO paper)."})
    epsilon: float = field(default=0.2, metadata={"help": "Clip range of the probability ratio (lower side)."})
    epsilon_high: float | None = field(
        default=None, metadata={"help": "Upper clip range (None: epsilon; DAPO recommends 0.28)."})
    reward_weights: list[float] | None = field(
        default=None, metadata={"help": "Weight of each reward function (None: all 1.0)."})
    mask_truncated_completions: bool = field(
        default=False, metadata={"help": "Leave answers cut at max_completion_length out of the loss (DAPO)."})
    log_completions: bool = field(default=False, metadata={"help": "Print a sample of prompts and answers at each log."})
    num_completions_to_print: int | None = field(
        default=None, metadata={"help": "With log_completions: how many (None: all of the logging window)."})
    # TRL turns (gradient) activation checkpointing on by default; here it keeps transformers' default, off: on CPU
    # memory is rarely what limits a small model, and recomputing every block costs about a fifth of the step.
    # TRL 1.16 fields that need hardware or libraries this library does not drive:
    use_vllm: bool = trl_only(False, "vLLM generation needs a CUDA GPU and the vllm package; generation here is transformers' generate()")
    vllm_mode: str = trl_only("colocate", "only used with use_vllm")
    vllm_model_impl: str = trl_only("vllm", "only used with use_vllm")
    vllm_enable_sleep_mode: bool = trl_only(False, "only used with use_vllm")
    vllm_structured_outputs_regex: str | None = trl_only(None, "only used with use_vllm")
    vllm_server_base_url: str | None = trl_only(None, "only used with use_vllm")
    vllm_server_host: str = trl_only("0.0.0.0", "only used with use_vllm")
    vllm_server_port: int = trl_only(8000, "only used with use_vllm")
    vllm_server_timeout: float = trl_only(240.0, "only used with use_vllm")
    vllm_group_port: int = trl_only(51216, "only used with use_vllm")
    vllm_gpu_memory_utilization: float = trl_only(0.3, "only used with use_vllm")
    vllm_max_model_length: int | None = trl_only(None, "only used with use_vllm")
    vllm_tensor_parallel_size: int = trl_only(1, "only used with use_vllm")
    use_transformers_continuous_batching: bool = trl_only(False, "continuous batching needs transformers' paged attention kernels (GPU)")
    transformers_continuous_batching_config: dict | None = trl_only(None, "only used with use_transformers_continuous_batching")
    use_transformers_paged: bool = trl_only(False, "deprecated alias of use_transformers_continuous_batching")
    ds3_gather_for_generation: bool = trl_only(True, "ZeRO-3 generation always gathers the weights here (rlhf/distributed.py)")
    cache_implementation: str | None = trl_only(None, "generate() uses the model's default cache")
    pad_to_multiple_of: int | str | None = trl_only("auto", "shapes are never padded to a multiple (that helps compiled accelerators only)")
    trust_remote_code: bool = trl_only(False, "models are loaded from safetensors without custom code (rlhf/loading.py)")
    router_aux_loss_coef: float | None = trl_only(None, "Mixture-of-Experts auxiliary losses are not wired in")
    cast_lm_head_to_fp32: bool = trl_only(False, "the log-softmax already runs in fp32 (rlhf/core.py logprobs_from_logits)")
    sync_ref_model: bool = trl_only(False, "TR-DPO reference syncing is not implemented")
    ref_model_mixup_alpha: float = trl_only(0.6, "only used with sync_ref_model")
    ref_model_sync_steps: int = trl_only(512, "only used with sync_ref_model")
    log_multimodal: bool = trl_only(True, "only text models are supported")
    log_unique_prompts: bool = trl_only(False, "completions are printed, not logged as tables")
    max_tool_calling_iterations: int | None = trl_only(None, "tool calling is not supported")

    def __post_init__(self):
        refuse_trl_only_values(self)
        if self.auto_find_batch_size:
            raise ValueError("auto_find_batch_size=True: not supported (the generation batch must hold whole groups of "
                             "num_generations answers, which halving the batch breaks)")
        if self.num_generations < 2:
            raise ValueError(f"num_generations={self.num_generations!r}: must be at least 2 (advantages compare the answers to one prompt)")
        if not 1 <= self.max_completion_length <= MAX_NEW_TOKENS:
            raise ValueError(f"max_completion_length={self.max_completion_length!r}: must be between 1 and "
                             f"{MAX_NEW_TOKENS:,}")
        if self.num_iterations < 1:
            raise ValueError(f"num_iterations={self.num_iterations!r}: must be at least 1")
        if self.beta < 0:
            raise ValueError(f"beta={self.beta!r}: must be >= 0")
        if self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature!r}: must be positive")
        super().__post_init__()
        processes = self.world_size
        if self.generation_batch_size is None and self.steps_per_generation is None:
            self.steps_per_generation = self.gradient_accumulation_steps
            self.generation_batch_size = self.per_device_train_batch_size * processes * self.steps_per_generation
        elif self.generation_batch_size is not None and self.steps_per_generation is None:
            if self.generation_batch_size % (self.per_device_train_batch_size * processes):
                raise ValueError(f"generation_batch_size={self.generation_batch_size}: must be a multiple of the global "
                                 f"batch size {self.per_device_train_batch_size * processes}")
            self.steps_per_generation = self.generation_batch_size // (self.per_device_train_batch_size * processes)
        elif self.generation_batch_size is None:
            self.generation_batch_size = self.per_device_train_batch_size * processes * self.steps_per_generation
        else:
            raise ValueError("generation_batch_size and steps_per_generation: set one of them, not both")
        if self.generation_batch_size % self.num_generations:
            raise ValueError(f"generation_batch_size={self.generation_batch_size}: must be a multiple of "
                             f"num_generations={self.num_generations} (whole groups of answers to a prompt)")

    @property
    def epsilon_upper(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def needs_old_logps(self) -> bool:
        """Whether each generation batch gets a no-grad pass for the sampling policy's log-probs. The micro-batches
        of one generation batch meet an unchanged policy only when the optimizer steps after all of them and they
        are used once; then the old log-probs are the new ones, detached (TRL skips them too)."""
        return self.gradient_accumulation_steps % (self.steps_per_generation * self.num_iterations) != 0


@dataclass
class GRPOConfig(OnlineRLConfig):
    """TRL 1.16's GRPOConfig: the shared online fields plus GRPO's advantage scaling and loss variants."""

    loss_type: str = field(default="dapo", metadata={
        "help": "grpo: token mean per answer, then mean over answers; bnpo: token mean over the micro-batch; "
                "dr_grpo: token sum / (answers * max_completion_length); dapo: token mean over the optimizer step."})
    scale_rewards: str = field(default="group", metadata={
        "help": "Divide advantages by the std of the group (group), of the batch (batch) or not at all (none; Dr. GRPO)."})
    importance_sampling_level: str = field(default="token", metadata={
        "help": "Probability ratio per token (token) or one per answer from its mean log-ratio (sequence; GSPO)."})
    delta: float | None = field(default=None, metadata={
        "help": "Also cap the unclipped ratio at delta (INTELLECT-2's two-sided clip; None: off)."})
    use_bias_correction_kl: bool = field(default=True, metadata={
        "help": "Multiply the per-token KL by the probability ratio (DeepSeek-V3.2's unbiased KL gradient)."})
    multi_objective_aggregation: str = trl_only("sum_then_normalize", "the weighted rewards are summed, then normalised")
    top_entropy_quantile: float = trl_only(1.0, "every completion token takes part in the loss")
    entropy_coef: float = trl_only(0.0, "no entropy bonus")
    use_adaptive_entropy: bool = trl_only(False, "no entropy bonus")
    entropy_coef_min: float = trl_only(0.0, "no entropy bonus")
    entropy_coef_max: float = trl_only(1.0, "no entropy bonus")
    entropy_coef_delta: float = trl_only(0.005, "no entropy bonus")
    entropy_target: float = trl_only(0.2, "no entropy bonus")
    off_policy_mask_threshold: float | None = trl_only(None, "off-policy sequence masking is for vLLM sampling")
    sapo_temperature_neg: float = trl_only(1.05, "the sapo loss is not implemented")
    sapo_temperature_pos: float = trl_only(1.0, "the sapo loss is not implemented")
    vespo_k_pos: float = trl_only(2.0, "the vespo loss is not implemented")
    vespo_lambda_pos: float = trl_only(3.0, "the vespo loss is not implemented")
    vespo_k_neg: float = trl_only(3.0, "the vespo loss is not implemented")
    vespo_lambda_neg: float = trl_only(2.0, "the vespo loss is not implemented")
    vllm_importance_sampling_correction: bool = trl_only(True, "only used with use_vllm")
    vllm_importance_sampling_mode: str = trl_only("sequence_mask", "only used with use_vllm")
    vllm_importance_sampling_clip_max: float | None = trl_only(3.0, "only used with use_vllm")
    vllm_importance_sampling_clip_min: float | None = trl_only(None, "only used with use_vllm")
    vllm_importance_sampling_cap: float | None = trl_only(None, "only used with use_vllm")
    log_completions_hub_repo: str | None = trl_only(None, "completions are printed, not pushed")

    def __post_init__(self):
        if self.loss_type not in GRPO_LOSS_TYPES:
            raise ValueError(f"loss_type={self.loss_type!r}: must be one of {', '.join(GRPO_LOSS_TYPES)} (TRL's cispo, "
                             "sapo, luspo and vespo are not implemented)")
        # TRL accepts True/False for scale_rewards (group/none).
        self.scale_rewards = {True: "group", False: "none"}.get(self.scale_rewards, self.scale_rewards)
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(f"scale_rewards={self.scale_rewards!r}: must be group, batch or none")
        if self.importance_sampling_level not in ("token", "sequence"):
            raise ValueError(f"importance_sampling_level={self.importance_sampling_level!r}: must be token or sequence")
        super().__post_init__()


class ModelReward:
    """A sequence-classification reward model as a TRL reward function: (prompt, completion) encoded as in
    RewardTrainer's training (rlhf/data.py tokenize_for_reward), scored on one output."""

    def __init__(self, model: torch.nn.Module, tokenizer, max_length: int | None = 512):
        self.model, self.tokenizer, self.max_length = model.eval().requires_grad_(False), tokenizer, max_length
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.__name__ = str(getattr(model.config, "_name_or_path", "reward_model")).rstrip("/").split("/")[-1] or "reward_model"

    @torch.no_grad()
    def __call__(self, prompts: list, completions: list, **kwargs) -> list[float]:
        device = next(self.model.parameters()).device
        rows = [tokenize_for_reward(self.tokenizer, *render_prompt_completion(self.tokenizer, p, c), self.max_length)
                for p, c in zip(prompts, completions)]
        batch = {key: pad_token_lists([r[key] for r in rows], self.tokenizer.pad_token_id if key == "input_ids" else 0).to(device)
                 for key in rows[0]}
        return self.model(**batch).logits[:, 0].float().tolist()


def callable_name(function: Callable) -> str:
    return getattr(function, "__name__", None) or type(function).__name__


def _reward_function(spec: RewardFunc, processing_class=None):
    """A reward function from TRL's accepted forms: a callable, a model path/name, or a loaded reward model."""
    if isinstance(spec, (str, os.PathLike)):
        from rlhf.reward import load_reward_model

        path = resolve_model_path(spec)
        reward = ModelReward(merge_adapter(load_reward_model(path)), processing_class or load_tokenizer(path, padding_side="right"))
        reward.__name__ = str(spec).rstrip("/").split("/")[-1]
        return reward
    if isinstance(spec, torch.nn.Module):
        if processing_class is None:
            name = getattr(spec.config, "_name_or_path", "")
            if not name:
                raise ValueError("reward_funcs: a reward model object needs its tokenizer in reward_processing_classes")
            processing_class = load_tokenizer(name, padding_side="right")
        return ModelReward(spec, processing_class)
    if callable(spec):
        return spec
    raise TypeError(f"reward_funcs: {spec!r} is neither a callable, a reward model nor a model path")


class GRPOTrainer(BaseTrainer):
    """GRPO with TRL 1.16's constructor, config and logged names (reward, reward_std, kl, entropy,
    completions/mean_length, clip_ratio/..., rewards/<function>/mean ...)."""

    # The losses below divide by the accumulation themselves (grpo, bnpo, dr_grpo) or by the tokens of the whole
    # optimizer step (dapo), as TRL does.
    loss_is_scaled_for_ga = True
    config_class = GRPOConfig
    _name = "GRPO"
    padding_side = "left"  # generation continues from the last prompt token
    evaluate_returns_logged_metrics = False  # evaluate() returns Trainer's dict, as TRL's GRPOTrainer does

    def __init__(
        self,
        model: torch.nn.Module | str | None = None,
        reward_funcs: RewardFunc | list[RewardFunc] | None = None,
        args: OnlineRLConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_classes=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
        quantization_config=None,
        tools=None,
        rollout_func=None,
        environment_factory=None,
    ):
        # 1. the config, and the TRL arguments this trainer cannot honour refused by name
        self._refuse_unsupported(quantization_config=quantization_config, tools=tools, rollout_func=rollout_func,
                                 environment_factory=environment_factory)
        args = self._checked_args(args, model)
        if not reward_funcs:
            raise ValueError(f"{self._name}Trainer: reward_funcs is required (a function, a reward model, or a list)")
        # 2. the policy and its tokenizer (left padding: generation continues from the last prompt token)
        model, processing_class = self._generating_policy(model, args, processing_class, peft_config)
        if args.disable_dropout:
            disable_dropout(model)
        # 3. the reference: a frozen copy taken now (before any training), or the policy with its LoRA adapter off
        copy_reference = args.beta != 0.0 and peft_config is None and not is_peft_model(model)
        ref_model = self._frozen_copy(model, args) if copy_reference else None
        model = prepare_model(model, args, peft_config)
        # 4. reward functions, their names (for rewards/<name>/mean) and weights; the datasets' prompt columns
        self._set_rewards(reward_funcs, reward_processing_classes, args.reward_weights)
        check_prompt_columns(train_dataset=train_dataset, eval_dataset=eval_dataset)
        # 5. transformers' Trainer (optimizer, data, accelerate)
        self._set_group_sizes(args)
        super().__init__(
            model=model,
            args=args,
            data_collator=lambda rows: rows,  # rows stay dicts: prompts are generated from, not tokenised, here
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
        )
        # 6. the reference and the reward models placed as the policy is
        self._place_reference(ref_model)
        self._place_reward_models()
        # 7. generation's end-of-answer ids and the step's buffers
        self._set_generation_ids(model, processing_class)
        self._start_buffers()

    # ---- the constructor's steps ---------------------------------------------------------------------------
    _UNSUPPORTED = {
        "quantization_config": "for QLoRA set load_in_4bit=True in the config, with a peft_config",
        "tools": "tool calling is not supported",
        "rollout_func": "custom rollouts are not supported; generation is transformers' generate()",
        "environment_factory": "environments are not supported",
    }

    def _refuse_unsupported(self, **given) -> None:
        for name, value in given.items():
            if value:
                raise ValueError(f"{self._name}Trainer({name}=...): not supported here ({self._UNSUPPORTED[name]})")

    def _default_args(self, model):
        """TRL's default config: named after the model."""
        base = model if isinstance(model, str) else "model"
        return self.config_class(output_dir=f"{str(base).rstrip('/').split('/')[-1]}-{self._name}")

    @staticmethod
    def _frozen_copy(model, args):
        """The reference, copied from the policy in bf16 when the run computes in bf16 (half the memory of an fp32
        copy, rlhf/precision.py reference_dtype), frozen and with the training attention kernel."""
        return freeze_reference(copy_in_dtype(model, reference_dtype(torch.bfloat16 if args.bf16 else None)), args)

    def _set_rewards(self, reward_funcs, reward_processing_classes, reward_weights) -> None:
        reward_funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        if not isinstance(reward_processing_classes, (list, tuple)):
            reward_processing_classes = [reward_processing_classes] * len(reward_funcs)
        if len(reward_processing_classes) != len(reward_funcs):
            raise ValueError(f"reward_processing_classes: {len(reward_processing_classes)} given for "
                             f"{len(reward_funcs)} reward functions")
        self.reward_funcs = [_reward_function(f, p) for f, p in zip(reward_funcs, reward_processing_classes)]
        self.reward_func_names = [callable_name(f) for f in self.reward_funcs]
        weights = reward_weights if reward_weights is not None else [1.0] * len(self.reward_funcs)
        if len(weights) != len(self.reward_funcs):
            raise ValueError(f"reward_weights: {len(weights)} weights for {len(self.reward_funcs)} reward functions")
        self.reward_weights = torch.tensor(weights, dtype=torch.float32)

    def _set_group_sizes(self, args) -> None:
        """Answers per prompt (in training and evaluation) and optimizer passes per generation batch."""
        self.num_generations = args.num_generations
        self.num_generations_eval = args.num_generations_eval or args.num_generations
        self.num_iterations = args.num_iterations

    def _place_reward_models(self) -> None:
        for reward in self.reward_funcs:
            if isinstance(reward, ModelReward):
                reward.model.to(self.accelerator.device)

    def _start_buffers(self) -> None:
        self._step = 0  # micro-steps, for reusing a generation batch
        self._buffered_inputs: list[dict] | None = None
        self._completions: list[tuple[Any, Any, float]] = []
        self._step_time = 0.0

    # ---- data: whole groups of each prompt, one generation batch per steps_per_generation micro-steps --------
    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = ["prompt"]

    def get_train_dataloader(self):
        # Each loader batch is a whole generation batch; _prepare_inputs cuts it into micro-batches.
        return self._get_dataloader(
            dataset=self.train_dataset, description="Training",
            batch_size=self._train_batch_size * self.args.steps_per_generation,
            sampler_fn=self._get_train_sampler, is_training=True)

    def _get_train_sampler(self, dataset=None) -> Sampler:
        return RepeatSampler(dataset if dataset is not None else self.train_dataset, self.num_generations,
                             batch_size=self.args.generation_batch_size // self.num_generations,
                             repeat_count=self.num_iterations * self.args.steps_per_generation,
                             shuffle=self.args.shuffle_dataset, seed=self.args.seed)

    def _get_eval_sampler(self, eval_dataset) -> Sampler:
        return RepeatSampler(eval_dataset, self.num_generations_eval, seed=self.args.seed)

    def training_step(self, model, inputs, num_items_in_batch=None):
        start = time.perf_counter()
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._step += 1
        self._step_time += time.perf_counter() - start
        if self._step % self.current_gradient_accumulation_steps == 0:
            self._metrics["train"]["step_time"].append(self._step_time)
            self._step_time = 0.0
        return loss

    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return self._generate_and_score(generation_batch)
        if self._step % (self.args.steps_per_generation * self.num_iterations) == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score(generation_batch)
            # Shuffled so each micro-batch mixes prompts; whole groups are no longer needed once advantages exist.
            order = torch.randperm(len(batch["advantages"]))
            batch = {k: v[order] if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in batch.items()}
            chunks = self.args.steps_per_generation
            size = len(order) // chunks
            self._buffered_inputs = [
                {k: v[i * size : (i + 1) * size] if isinstance(v, torch.Tensor) and v.dim() > 0 else v
                 for k, v in batch.items()} for i in range(chunks)]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # ---- 1. generate --------------------------------------------------------------------------------------
    def _prompt_ids(self, prompts: list) -> list[torch.Tensor]:
        tokenizer = self.processing_class
        if is_conversational({"prompt": prompts[0]}):
            texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True,
                                                   **(self.args.chat_template_kwargs or {})) for p in prompts]
            return [torch.tensor(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        return [torch.tensor(ids) for ids in tokenizer(text=prompts)["input_ids"]]

    def _generation_kwargs(self) -> dict:
        args = self.args
        kwargs = dict(max_new_tokens=args.max_completion_length, do_sample=True, temperature=args.temperature,
                      top_p=args.top_p, top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
                      eos_token_id=self.eos_ids, pad_token_id=self.processing_class.pad_token_id)
        kwargs.update(args.generation_kwargs or {})
        return kwargs

    @torch.no_grad()
    def _generate(self, prompt_ids: list[torch.Tensor]) -> list[torch.Tensor]:
        """One sample per row (rows repeat each prompt num_generations times), cut after the first EOS."""
        device = self.accelerator.device
        input_ids, attention_mask = left_pad(prompt_ids, self.processing_class.pad_token_id)
        with unwrap_model_for_generation(self.model_wrapped, self.accelerator) as unwrapped:
            was_training = unwrapped.training
            unwrapped.eval()
            try:
                with self.accelerator.autocast():
                    output = unwrapped.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                                **self._generation_kwargs())  # (N, P + C)
            finally:
                unwrapped.train(was_training)
        return self._cut_after_eos(output[:, input_ids.shape[1]:])

    # ---- 2. log-probs of the completion tokens -----------------------------------------------------------
    def _token_logps(self, model, batch: dict, with_entropy: bool = False):
        """Per-token log-probs (B, C) of the completion under `model`, and (optionally) the entropy per token."""
        with self.accelerator.autocast():
            # use_cache=False: no pass here reuses a KV cache, which would otherwise hold every layer's keys
            logits = self._completion_logits(model, batch, use_cache=False)  # (B, C, V)
        # fp32 a chunk of positions at a time: no fp32 (B, C, V) copy is kept (rlhf/core.py selective_log_softmax).
        logps = selective_log_softmax(logits, batch["completion_ids"], self.args.temperature)  # (B, C)
        entropy = None
        if with_entropy:
            with torch.no_grad():
                entropy = entropy_from_logits(logits, self.args.temperature)  # (B, C)
        return logps, entropy

    @torch.no_grad()
    def _logps_in_chunks(self, model, batch: dict) -> torch.Tensor:
        """_token_logps over a whole generation batch, a mini-batch of rows at a time (no gradient): the peak is
        one mini-batch's logits, not the generation batch's."""
        size = self.args.per_device_train_batch_size
        rows = batch["completion_ids"].shape[0]
        keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
        return torch.cat([self._token_logps(model, {k: batch[k][i : i + size] for k in keys})[0]
                          for i in range(0, rows, size)])

    @torch.no_grad()
    def _reference_logps(self, batch: dict) -> torch.Tensor:
        if self.ref_model is not None:
            return self._logps_in_chunks(self.ref_model, batch)
        with self.accelerator.unwrap_model(self.model).disable_adapter():  # LoRA: the base model is the reference
            return self._logps_in_chunks(self.model, batch)

    # ---- 3. rewards and advantages -----------------------------------------------------------------------
    def _rewards(self, rows: list[dict], prompts: list, completions: list, completion_ids: list[list[int]]) -> torch.Tensor:
        """(N, F) rewards, NaN where a function returned None. Other dataset columns come as keyword arguments."""
        extra = {k: [row[k] for row in rows] for k in rows[0] if k not in ("prompt", "completion", "completion_ids")}
        extra.update(trainer_state=self.state, log_metric=lambda name, value: self._metrics[self._mode()][name].append(value),
                     log_extra=lambda column, values: None)
        out = torch.full((len(prompts), len(self.reward_funcs)), float("nan"))
        for i, (function, name) in enumerate(zip(self.reward_funcs, self.reward_func_names)):
            if isinstance(function, ModelReward):
                values = function(prompts, completions)
            else:
                values = function(prompts=prompts, completions=completions, completion_ids=completion_ids, **extra)
            values = list(values)
            if len(values) != len(prompts):
                raise ValueError(f"reward function {name!r} returned {len(values)} rewards for {len(prompts)} completions")
            out[:, i] = torch.tensor([float("nan") if v is None else float(v) for v in values])
        return out

    def compute_advantages(self, rewards: torch.Tensor, batch: dict, num_generations: int) -> torch.Tensor:
        """(N,) advantages from the summed rewards (NaN: none). RLOOTrainer overrides this."""
        advantages, std = group_relative_advantages(rewards, num_generations, self.args.scale_rewards)
        self._metrics[self._mode()]["frac_reward_zero_std"].append(
            torch.isclose(std, torch.zeros_like(std)).float().mean().item())
        return advantages

    def _generate_and_score(self, rows: list[dict]) -> dict:
        mode = self._mode()
        metrics = self._metrics[mode]
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        device = self.accelerator.device
        prompts = [row["prompt"] for row in rows]
        # 1. sample one answer per row (each prompt appears num_generations times in a row)
        prompt_ids = self._prompt_ids(prompts)
        completion_ids = self._generate(prompt_ids)
        completion_lists = [c.tolist() for c in completion_ids]
        texts = self.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        completions = [[{"role": "assistant", "content": t}] for t in texts] if is_conversational({"prompt": prompts[0]}) else texts
        # 2. tensors: prompts left padded, completions right padded
        pad = self.processing_class.pad_token_id
        prompt_tensor, prompt_mask = left_pad(prompt_ids, pad)
        batch = {
            "prompt_ids": prompt_tensor.to(device), "prompt_mask": prompt_mask.to(device),
            "completion_ids": pad_token_lists(completion_lists, pad).to(device),
            "completion_mask": pad_token_lists([[1] * len(c) for c in completion_lists], 0).to(device),
        }
        is_truncated = torch.tensor([len(c) == 0 or c[-1] not in self.eos_ids for c in completion_lists], device=device)
        if self.args.mask_truncated_completions:
            batch["completion_mask"] = batch["completion_mask"] * (~is_truncated).unsqueeze(1).long()
        batch["num_items_in_batch"] = self.accelerator.gather(batch["completion_mask"].sum()).sum()
        # 3. log-probs at sampling time (only where the policy will have moved by the time it trains on them) and the
        # reference's (only with a KL term)
        with torch.no_grad():
            if self.args.needs_old_logps:
                batch["old_per_token_logps"] = self._logps_in_chunks(self.model, batch)
            if self.args.beta != 0.0:
                batch["ref_per_token_logps"] = self._reference_logps(batch)
        # 4. rewards: every function on every answer, weighted sum; advantages within each prompt's group (gathered
        # over processes so a group split across ranks is still whole)
        per_function = self.accelerator.gather(self._rewards(rows, prompts, completions, completion_lists).to(device))
        unscorable = torch.isnan(per_function).all(dim=1)
        rewards = (per_function * self.reward_weights.to(device)).nansum(dim=1)
        rewards[unscorable] = float("nan")
        advantages = self.compute_advantages(rewards, batch, num_generations)
        rank = self.accelerator.process_index
        batch["advantages"] = advantages[rank * len(prompts) : (rank + 1) * len(prompts)]
        # 5. TRL's logged statistics
        lengths = self.accelerator.gather(torch.tensor([len(c) for c in completion_lists], device=device)).float()
        truncated = self.accelerator.gather(is_truncated)
        terminated = lengths[~truncated] if (~truncated).any() else torch.zeros(1, device=device)
        if mode == "train":
            prompt_tokens = self.accelerator.gather(prompt_mask.sum().to(device)).sum()
            self.state.num_input_tokens_seen += int(prompt_tokens + lengths.sum())
        metrics["num_tokens"] = [float(self.state.num_input_tokens_seen)]
        for stat, values in (("length", lengths), ("terminated_length", terminated)):
            metrics[f"completions/mean_{stat}"].append(values.mean().item())
            metrics[f"completions/min_{stat}"].append(values.min().item())
            metrics[f"completions/max_{stat}"].append(values.max().item())
        metrics["completions/clipped_ratio"].append(truncated.float().mean().item())
        for i, name in enumerate(self.reward_func_names):
            metrics[f"rewards/{name}/mean"].append(torch.nanmean(per_function[:, i]).item())
            metrics[f"rewards/{name}/std"].append(nan_std(per_function[:, i]).item())
        logged = (per_function * self.reward_weights.to(device)).nansum(dim=1)
        logged[unscorable] = float("nan")
        metrics["reward"].append(torch.nanmean(logged).item())
        metrics["reward_std"].append(nan_std(logged).item())
        if self.args.log_completions:
            self._completions.extend(zip(prompts, completions, logged[rank * len(prompts):].tolist()))
        return batch

    # ---- 4. the loss ------------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs:
            raise ValueError(f"The {self._name}Trainer does not support returning outputs")
        mode = self._mode()
        metrics = self._metrics[mode]
        mask = inputs["completion_mask"].float()
        logps, entropy = self._token_logps(model, inputs, with_entropy=True)  # (B, C)
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        log_ratio = logps - old
        if self.args.importance_sampling_level == "sequence":
            log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)  # (B, 1)
        advantages = inputs["advantages"].unsqueeze(1)  # (B, 1)
        per_token_loss, clipped = clipped_surrogate(log_ratio, advantages, self.args.epsilon, self.args.epsilon_upper,
                                                    self.args.delta)
        per_token_loss = per_token_loss.expand_as(logps)
        if self.args.beta != 0.0:
            per_token_kl = k3_kl(logps, inputs["ref_per_token_logps"])
            if self.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * torch.exp(log_ratio)
            per_token_loss = per_token_loss + self.args.beta * per_token_kl
            metrics["kl"].append(self._global_masked_mean(per_token_kl, mask))
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        if self.args.loss_type == "dapo":
            # num_items_in_batch counts the whole generation batch's tokens (all processes): per process and per
            # accumulation window, so that the window's micro-batch losses add up to its token mean.
            window = inputs["num_items_in_batch"] / self.accelerator.num_processes
            if mode == "train":
                window = window * accumulation / self.args.steps_per_generation
            loss = aggregate_token_losses(per_token_loss, mask, "dapo", num_active_tokens=window)
        else:
            loss = aggregate_token_losses(per_token_loss, mask, self.args.loss_type,
                                          self.args.max_completion_length) / accumulation
        metrics["entropy"].append(self._global_masked_mean(entropy, mask))
        clip_mask = mask if log_ratio.shape[1] > 1 else torch.ones_like(log_ratio)
        for name in ("low", "high", "region"):
            metrics[f"clip_ratio/{name}_mean"].append(self._global_masked_mean(clipped[name].float(), clip_mask))
        per_answer = lambda x: (x.float() * clip_mask).sum(-1) / clip_mask.sum(-1).clamp(min=1.0)  # noqa: E731
        metrics["clip_ratio/low_min"].append(self.accelerator.gather(per_answer(clipped["low"])).min().item())
        metrics["clip_ratio/high_max"].append(self.accelerator.gather(per_answer(clipped["high"])).max().item())
        return loss

    def _global_masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        totals = self.accelerator.reduce(torch.stack([(values.detach() * mask).sum(), mask.sum()]), reduction="sum")
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    @staticmethod
    def _average(values: list[float]) -> float | None:
        # NaN (a reward function that returned only None) left out; None when nothing is left.
        valid = [v for v in values if v == v]
        return sum(valid) / len(valid) if valid else None

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        super().log(logs, start_time)
        if self.args.log_completions and self.accelerator.is_main_process and self._completions:
            shown = self._completions[: self.args.num_completions_to_print or len(self._completions)]
            for prompt, completion, reward in shown:
                print(f"[step {self.state.global_step}] reward {reward:.3f} | {prompt!r} -> {completion!r}")
            self._completions.clear()


__all__ = ["GRPOConfig", "GRPOTrainer", "ModelReward", "OnlineRLConfig", "RepeatSampler"]
