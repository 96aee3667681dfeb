"""Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback") with TRL's
OnlineDPOTrainer API, on transformers.Trainer.

    def prefers_short(prompts, completions, **kwargs):
        return [-len(c) for c in completions]

    trainer = OnlineDPOTrainer("default", judge=prefers_short, args=OnlineDPOConfig(output_dir="odpo"),
                               train_dataset=prompts)            # a "prompt" column, text or messages
    trainer.train()

Each step, for a batch of prompts:
1. the policy samples two answers to each prompt (XPO: the second from the reference; Nash-MD: from a mixture), or
   `num_generations` > 2 (this library's addition) answers;
2. the judge says which of each pair is better (`judge=`: a BasePairwiseJudge, a BaseRankJudge or a reward function;
   `reward_model=`: a reward model, wrapped as rlhf.judges.RewardModelJudge); a tie leaves the pair out of the loss.
   Of more than two answers, a judge that scores or ranks picks the best and the worst as the pair;
3. the frozen reference scores both answers (no gradient);
4. the loss is DPO's (sigmoid or IPO, rlhf/online_losses.py) on the fresh pairs, against the reference;
   `num_iterations` > 1 (this library's addition, GRPO's mu) trains that many optimizer passes over each batch of
   judged pairs, so each judgement (a person's included) is learnt from more than once.
The reference is `ref_model` if given, the policy with its LoRA adapter off with `peft_config`, otherwise a frozen copy
of the policy taken before training. Logged names are TRL's (objective/kl, objective/entropy, objective/scores,
rewards/chosen, rewards/accuracies, rewards/margins, logps/chosen, val/contain_eos_token, beta, ...) plus judge/ties.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers import TrainerCallback

from rlhf.base_trainer import BaseTrainer, check_prompt_columns
from rlhf.configs import MAX_NEW_TOKENS
from rlhf.core import selective_log_softmax
from rlhf.data import is_conversational, pad_token_lists
from rlhf.distributed import unwrap_model_for_generation
from rlhf.generation import left_pad
from rlhf.judges import (
    TIE,
    JudgeError,
    RankAsPairwiseJudge,
    RewardModelJudge,
    ScoreJudge,
    as_pairwise_judge,
    check_pairwise_verdicts,
    check_rankings,
    chosen_pair,
    judge_name,
    ranking_from_scores,
)
from rlhf.kl_control import kl_budget_spent
from rlhf.loading import DEFAULT_POLICY
from rlhf.online_losses import (
    ONLINE_DPO_LOSS_TYPES,
    chosen_rejected_rows,
    missing_eos_penalty,
    online_dpo_losses,
    value_for_epoch,
    weighted_mean,
)
from rlhf.peft_utils import is_peft_model
from rlhf.samplers import RepeatSampler
from rlhf.trainer_config import TrainerConfig, refuse_trl_only_values, trl_only
from rlhf.trainer_setup import disable_dropout, prepare_model

# kl_budget reads the mean KL of this many optimizer steps: one batch of 8 prompts' KL varies by a few nats.
KL_BUDGET_WINDOW = 5


def check_schedule(name: str, value, positive: bool = True, at_most_one: bool = False) -> float | list[float]:
    """A per-epoch setting (beta, alpha, mixture_coef): a number or a non-empty list of numbers, a one-item list read
    as its number (TRL does the same); ValueError naming the field otherwise."""
    values = [value] if isinstance(value, (int, float)) else list(value or [])
    if not values:
        raise ValueError(f"{name}={value!r}: give a number or a list of numbers (one per epoch)")
    for v in values:
        if not isinstance(v, (int, float)) or (positive and v <= 0) or (not positive and v < 0) or (at_most_one and v > 1):
            bound = "in [0, 1]" if at_most_one else "positive" if positive else ">= 0"
            raise ValueError(f"{name}={value!r}: every value must be {bound}")
    return float(values[0]) if len(values) == 1 else [float(v) for v in values]


@dataclass
class OnlineDPOConfig(TrainerConfig):
    """TRL's OnlineDPOConfig: TrainingArguments plus online DPO's fields
    (TRL's names and defaults except where noted)."""

    model_name_or_path: str = field(
        default=DEFAULT_POLICY, metadata={"help": "Policy when the trainer is given no model: 'default', a folder, an adapter folder."})
    reward_model_path: str | None = field(default=None, metadata={
        "help": "Reward model folder to judge with (used when the trainer is given neither judge= nor reward_model=)."})
    judge: str | None = field(default=None, metadata={
        "help": "Judge as 'module:name' (a reward function, a judge class or instance), used when the trainer is given "
                "neither judge= nor reward_model=."})
    max_new_tokens: int = field(default=64, metadata={"help": "Tokens generated per answer at most (TRL: 64 in 0.x, 128 now)."})
    max_length: int = field(default=512, metadata={
        "help": "Prompt + answer tokens at most: a prompt keeps its last max_length - max_new_tokens tokens."})
    temperature: float = field(default=0.9, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1.0: off)."})
    top_k: int = field(default=0, metadata={"help": "Keep the k most likely tokens (0: off)."})
    min_p: float | None = field(default=None, metadata={"help": "Minimum token probability relative to the most likely one (None: off)."})
    repetition_penalty: float = field(default=1.0, metadata={"help": "Penalty on tokens already in the prompt or answer (1.0: off)."})
    generation_kwargs: dict | None = field(default=None, metadata={
        "help": "More keyword arguments for generate(); they override the settings above."})
    missing_eos_penalty: float | None = field(default=None, metadata={
        "help": "Subtracted from the score of an answer that never ended (no EOS within max_new_tokens); needs a "
                "reward model or a scoring judge (FunctionJudge, RewardModelJudge). None: off."})
    beta: float | list[float] = field(default=0.1, metadata={
        "help": "KL strength to the reference (IPO's tau for loss_type='ipo'); a list gives one per epoch, the last "
                "for the rest."})
    kl_budget: float | None = field(default=None, metadata={
        "help": "End training once the policy's KL to the reference (objective/kl, nats per answer, the mean of the "
                f"last {KL_BUDGET_WINDOW} optimizer steps) reaches this; the final model is the one at that step "
                "(this library's; None: off, as in TRL)."})
    loss_type: Literal["sigmoid", "ipo"] = field(default="sigmoid", metadata={
        "help": "sigmoid (DPO's loss) or ipo (IPO's squared loss)."})
    num_generations: int = field(default=2, metadata={
        "help": "Answers sampled per prompt (this library's; 2: TRL's online DPO). More than 2 need a judge that scores "
                "or ranks (a reward model, a function, a BaseRankJudge): the pair is the best and the worst."})
    num_iterations: int = field(default=1, metadata={
        "help": "Optimizer passes over each batch of judged pairs (1: TRL's online DPO, each pair learnt from once; "
                "GRPO's mu). The pairs are generated and judged once; max_steps counts the passes."})
    soft_judgements: bool = field(default=False, metadata={
        "help": "Train each pair only as far as its judge is sure (this library's): where the judge says how sure it "
                "is of each verdict (a `last_confidence` list, one probability per prompt, as the app's judge=mix "
                "gives from its reward model's ensemble; people's verdicts count as sure), the loss's target is that "
                "probability (conservative DPO per pair) instead of 1. Other judges are taken as sure. False: TRL's."})
    disable_dropout: bool = field(default=True, metadata={"help": "Set every dropout probability to 0 in policy and reference."})
    learning_rate: float = field(default=5e-7, metadata={"help": "AdamW learning rate (TRL's default 5e-7)."})
    logging_steps: float = field(default=10, metadata={"help": "Log metrics every this many optimizer steps."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Prompts per step (two answers each)."})
    output_dir: str | None = field(default="online-dpo-model", metadata={"help": "Where checkpoints and the final model go."})
    remove_unused_columns: bool = field(default=False, metadata={
        "help": "Keep False: rows reach the trainer whole (the prompt is generated from, not tokenised, here)."})
    dataset_num_proc: int | None = field(default=None, metadata={"help": "Accepted for TRL scripts; prompts are not pre-processed here."})
    # TRL fields that need hardware or libraries this library does not drive:
    use_vllm: bool = trl_only(False, "vLLM generation needs a CUDA GPU and the vllm package; generation here is transformers' generate()")
    vllm_mode: str = trl_only("server", "only used with use_vllm")
    vllm_model_impl: str = trl_only("vllm", "only used with use_vllm")
    vllm_structured_outputs_regex: str | None = trl_only(None, "only used with use_vllm")
    vllm_gpu_memory_utilization: float | None = trl_only(0.55, "only used with use_vllm")
    vllm_server_base_url: str | None = trl_only(None, "only used with use_vllm")
    vllm_server_host: str = trl_only("0.0.0.0", "only used with use_vllm")
    vllm_server_port: int = trl_only(8000, "only used with use_vllm")
    vllm_server_timeout: float = trl_only(240.0, "only used with use_vllm")
    vllm_group_port: int = trl_only(51216, "only used with use_vllm")
    vllm_tensor_parallel_size: int = trl_only(1, "only used with use_vllm")
    vllm_enable_sleep_mode: bool = trl_only(False, "only used with use_vllm")
    use_transformers_paged: bool = trl_only(False, "paged generation needs transformers' paged attention kernels (GPU)")
    cache_implementation: str | None = trl_only(None, "generate() uses the model's default cache")
    ds3_gather_for_generation: bool = trl_only(True, "ZeRO-3 generation always gathers the weights here (rlhf/distributed.py)")
    reward_weights: list[float] | None = trl_only(None, "one judge or reward model per trainer here")

    def __post_init__(self):
        refuse_trl_only_values(self)
        self.beta = check_schedule("beta", self.beta)
        if not isinstance(self.num_generations, int) or self.num_generations < 2:
            raise ValueError(f"num_generations={self.num_generations!r}: must be a whole number, at least 2 (a pair)")
        if not isinstance(self.num_iterations, int) or self.num_iterations < 1:
            raise ValueError(f"num_iterations={self.num_iterations!r}: must be a whole number, at least 1")
        if self.loss_type not in ONLINE_DPO_LOSS_TYPES:
            raise ValueError(f"loss_type={self.loss_type!r}: must be one of {', '.join(ONLINE_DPO_LOSS_TYPES)}")
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens={self.max_new_tokens!r}: must be between 1 and {MAX_NEW_TOKENS:,}")
        if self.max_length <= self.max_new_tokens:
            raise ValueError(f"max_length={self.max_length!r}: must exceed max_new_tokens={self.max_new_tokens} "
                             "(the prompt keeps max_length - max_new_tokens tokens)")
        if self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature!r}: must be positive")
        if self.kl_budget is not None and not self.kl_budget > 0:
            raise ValueError(f"kl_budget={self.kl_budget!r}: must be a positive number of nats, or None (off)")
        if self.missing_eos_penalty is not None and self.missing_eos_penalty < 0:
            raise ValueError(f"missing_eos_penalty={self.missing_eos_penalty!r}: must be >= 0 (it is subtracted)")
        if self.reward_model_path is not None and self.judge is not None:
            raise ValueError("reward_model_path and judge: set one of them, not both")
        super().__post_init__()


def load_object(spec: str) -> Any:
    """'package.module:name' -> the object (a judge class or instance, or a reward function)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"judge={spec!r}: write it as 'module:name'")
    return getattr(importlib.import_module(module), name)


def resolve_judge(judge, reward_model, reward_processing_class, args) -> Any:
    """The one pairwise judge of a trainer, from judge=, reward_model= (TRL 0.12's name; newer TRL's reward_funcs),
    or the config's judge / reward_model_path."""
    given = [name for name, value in (("judge", judge), ("reward_model", reward_model)) if value is not None]
    if len(given) > 1:
        raise ValueError("give judge= or reward_model=, not both")
    if reward_model is not None:
        if isinstance(reward_model, (list, tuple)):
            if len(reward_model) != 1:
                raise ValueError(f"reward_funcs: one judge or reward model per trainer here, got {len(reward_model)}")
            reward_model = reward_model[0]
        if isinstance(reward_processing_class, (list, tuple)):
            reward_processing_class = reward_processing_class[0] if reward_processing_class else None
        if isinstance(reward_model, (str, os.PathLike)):
            return RewardModelJudge.from_pretrained(reward_model)
        if isinstance(reward_model, torch.nn.Module):
            return RewardModelJudge(reward_model, reward_processing_class)
        return as_pairwise_judge(reward_model)  # newer TRL: a reward function in reward_funcs
    if judge is not None:
        return as_pairwise_judge(judge)
    if args.judge is not None:
        found = load_object(args.judge)
        return as_pairwise_judge(found() if isinstance(found, type) else found)
    if args.reward_model_path is not None:
        return RewardModelJudge.from_pretrained(args.reward_model_path)
    raise ValueError("OnlineDPOTrainer needs a judge: judge= (a judge or a reward function) or reward_model=")


def plain_text(prompt: Any) -> str:
    """A prompt as text for a pairwise judge: a one-message conversation as its content, a longer one as
    'role: content' lines."""
    if isinstance(prompt, str):
        return prompt
    if len(prompt) == 1:
        return prompt[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def split_pair_batch(batch: dict, chunks: int) -> list[dict]:
    """A batch of B pairs cut into `chunks` batches of B / chunks pairs, pair i of each keeping both its answers:
    per-pair values (B,) are cut in order, per-answer values (2B,: the first answers, then the second) keep rows i
    and B + i together."""
    pairs = len(batch["verdicts"])
    if chunks == 1:
        return [batch]
    if pairs % chunks:
        raise ValueError(f"{pairs} pairs do not split into {chunks} micro-batches")
    size, out = pairs // chunks, []
    for c in range(chunks):
        first = torch.arange(c * size, (c + 1) * size)
        both = torch.cat([first, first + pairs])
        out.append({k: v[first.to(v.device)] if len(v) == pairs else v[both.to(v.device)] for k, v in batch.items()})
    return out


class KLBudgetCallback(TrainerCallback):
    """Ends training at the optimizer step where the trainer's KL budget is spent (OnlineDPOTrainer.spent_kl_budget):
    online DPO has a fixed beta and no controller, so on people's verdicts a rate that uses the budget at one seed
    ran far past it at another (docs/HUMAN_LOOP.md); a hard end is the brake PPO's target_kl early stop also is."""

    def __init__(self, trainer: "OnlineDPOTrainer"):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        if self.trainer.spent_kl_budget(state.global_step):
            control.should_training_stop = True
            control.should_log = True  # the last step's metrics, the stop among them, reach the log
        return control


class OnlineDPOTrainer(BaseTrainer):
    """Online DPO with TRL's constructor, config and logged names."""

    # The loss is a mean over the batch's pairs: the Trainer divides it for gradient accumulation (as DPOTrainer).
    loss_is_scaled_for_ga = False
    config_class = OnlineDPOConfig
    _name = "OnlineDPO"
    padding_side = "left"  # generation continues from the last prompt token
    evaluate_returns_logged_metrics = True
    reference_scores_second = True  # whether the reference scores the second answers too (Nash-MD's loss does not read them)

    def __init__(
        self,
        model: torch.nn.Module | str | None = None,
        ref_model: torch.nn.Module | str | None = None,
        reward_model=None,
        judge=None,
        args: OnlineDPOConfig | None = None,
        data_collator=None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        reward_processing_class=None,
        peft_config=None,
        compute_metrics=None,
        callbacks=None,
        optimizers=(None, None),
        preprocess_logits_for_metrics=None,
        reward_funcs=None,
        reward_processing_classes=None,
    ):
        args = self._checked_args(args)
        if reward_funcs is not None and reward_model is not None:
            raise ValueError("give reward_model= or reward_funcs=, not both")
        # 1. the judge (one pairwise judge, whatever form it was given in)
        self.judge = resolve_judge(judge, reward_model if reward_model is not None else reward_funcs,
                                   reward_processing_class if reward_processing_class is not None else reward_processing_classes,
                                   args)
        if args.num_generations > 2 and not isinstance(self.judge, (ScoreJudge, RankAsPairwiseJudge)):
            raise ValueError(f"num_generations={args.num_generations}: {judge_name(self.judge)} judges pairs only; more "
                             "than two answers need a judge that scores or ranks (a reward model, a function, a "
                             "BaseRankJudge)")
        if args.missing_eos_penalty and not isinstance(self.judge, ScoreJudge):
            raise ValueError(f"missing_eos_penalty={args.missing_eos_penalty!r}: needs a reward model or a scoring "
                             f"judge (FunctionJudge, RewardModelJudge); {judge_name(self.judge)} gives only verdicts")
        # 2. the policy and its tokenizer (left padding: generation continues from the last prompt token)
        model, processing_class = self._generating_policy(model, args, processing_class, peft_config)
        # 3. the reference: given, or the policy's frozen copy taken now, or (LoRA) the policy with its adapter off
        copies_policy = peft_config is None and not is_peft_model(model)
        ref_model = self._reference_model(ref_model, args, copy_of=model if copies_policy else None)
        if args.disable_dropout:
            disable_dropout(model, ref_model)
        model = prepare_model(model, args, peft_config)
        check_prompt_columns(train_dataset=train_dataset, eval_dataset=eval_dataset)
        # 4. transformers' Trainer (optimizer, data, accelerate), then the reference and the judge's model placed
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator or (lambda rows: rows),  # rows stay dicts: prompts are generated from
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        )
        self._place_reference(ref_model)
        if isinstance(self.judge, RewardModelJudge):
            self.judge.model.to(self.accelerator.device)
        # 5. generation's end-of-answer ids
        self._set_generation_ids(model, processing_class)
        self._micro_step = 0  # training micro-steps, for reusing a judged batch (num_iterations)
        self._buffered_inputs: list[dict] | None = None
        # 6. the KL budget: each optimizer step's KL (its micro-batches' mean, averaged over processes)
        self._micro_step_kls: list[float] = []
        self.step_kls: list[float] = []
        self.kl_budget_spent_at: int | None = None
        if args.kl_budget is not None:
            self.add_callback(KLBudgetCallback(self))

    @property
    def beta(self) -> float:
        """This epoch's beta (TRL: a list gives one per epoch, its last for the rest)."""
        return value_for_epoch(self.args.beta, self.state.epoch or 0)

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = ["prompt"]

    # ---- 0. data: one judged batch per gradient_accumulation_steps micro-steps, num_iterations times -------------
    def get_train_dataloader(self):
        # Each loader batch is a whole generation batch (an optimizer step's prompts); _prepare_inputs cuts it
        # into the accumulation's micro-batches and hands them out num_iterations times.
        return self._get_dataloader(
            dataset=self.train_dataset, description="Training",
            batch_size=self._train_batch_size * self.args.gradient_accumulation_steps,
            sampler_fn=self._get_train_sampler, is_training=True)

    def _get_train_sampler(self, dataset=None):
        return RepeatSampler(dataset if dataset is not None else self.train_dataset, 1,
                             batch_size=self._train_batch_size * self.args.gradient_accumulation_steps,
                             repeat_count=self.args.gradient_accumulation_steps * self.args.num_iterations,
                             seed=self.args.seed)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._micro_step += 1
        return loss

    def _prepare_inputs(self, rows: list[dict]) -> dict:
        if not self.model.training:
            return self._generate_and_judge(rows)
        chunks = self.args.gradient_accumulation_steps
        if self._micro_step % (chunks * self.args.num_iterations) == 0 or self._buffered_inputs is None:
            self._buffered_inputs = split_pair_batch(self._generate_and_judge(rows), chunks)
        return self._buffered_inputs[self._micro_step % chunks]

    # ---- 1. generate ------------------------------------------------------------------------------------------
    def _prompt_ids(self, prompts: list) -> list[torch.Tensor]:
        """Token ids of each prompt (a chat template for messages), cut to its last max_length - max_new_tokens."""
        tokenizer = self.processing_class
        if is_conversational({"prompt": prompts[0]}):
            texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
            ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        else:
            ids = tokenizer(text=prompts)["input_ids"]
        keep = self.args.max_length - self.args.max_new_tokens
        return [torch.tensor(i[-keep:]) for i in ids]

    def _generation_kwargs(self) -> dict:
        args = self.args
        kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=True, temperature=args.temperature, top_p=args.top_p,
                      top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
                      eos_token_id=self.eos_ids, pad_token_id=self.processing_class.pad_token_id)
        kwargs.update(args.generation_kwargs or {})
        return kwargs

    @torch.no_grad()
    def _sample(self, prompt_ids: list[torch.Tensor], reference: bool = False) -> list[torch.Tensor]:
        """One sampled answer per prompt from the policy (or, `reference`, from the reference: `ref_model`, or the
        policy with its LoRA adapter off), each cut after its first EOS."""
        device = self.accelerator.device
        input_ids, attention_mask = left_pad(prompt_ids, self.processing_class.pad_token_id)
        with unwrap_model_for_generation(self.model_wrapped, self.accelerator) as policy:
            generator = self.accelerator.unwrap_model(self.ref_model) if reference and self.ref_model is not None else policy
            adapter_off = reference and self.ref_model is None
            was_training = generator.training
            generator.eval()
            try:
                with policy.disable_adapter() if adapter_off else contextlib.nullcontext(), self.accelerator.autocast():
                    output = generator.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                                **self._generation_kwargs())  # (B, P + C)
            finally:
                generator.train(was_training)
        return self._cut_after_eos(output[:, input_ids.shape[1]:])

    def _generate_pair(self, prompt_ids: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Two answers per prompt: online DPO samples both from the policy (one generate() over the prompts twice).
        XPO and Nash-MD take the second from elsewhere."""
        answers = self._sample(prompt_ids + prompt_ids)
        return answers[: len(prompt_ids)], answers[len(prompt_ids):]

    def _generate_group(self, prompt_ids: list[torch.Tensor]) -> list[torch.Tensor]:
        """num_generations answers per prompt, in blocks: answer k of prompt i at k * B + i (B prompts). Two are
        the pair of _generate_pair; more are sampled from the policy in one generate()."""
        if self.args.num_generations == 2:
            first, second = self._generate_pair(prompt_ids)
            return first + second
        return self._sample(prompt_ids * self.args.num_generations)

    # ---- 2. judge -------------------------------------------------------------------------------------------------
    def _judge(self, prompts: list, texts: list[str], has_eos: torch.Tensor) -> tuple[list[tuple[int, int]], torch.Tensor, torch.Tensor | None]:
        """The pair each prompt trains on, from its group of answers (`texts` and `has_eos` in _generate_group's
        blocks): ([(first, second) answer indices within the group], verdicts (B,): 0 the first better, 1 the
        second, -1 a tie; the pair's scores (2B,: the firsts, then the seconds) or None). A scoring judge scores
        every answer and a rank judge ranks each group (rlhf.judges.chosen_pair: two answers keep their order, more
        give the best and the worst); a pairwise judge judges pairs. A judge that raises or breaks its contract
        stops the run with a JudgeError naming it and the step."""
        step, size, count = self.state.global_step + 1, self.args.num_generations, len(prompts)
        name = judge_name(self.judge)
        groups = [[texts[k * count + i] for k in range(size)] for i in range(count)]
        try:
            scores = None
            if isinstance(self.judge, ScoreJudge):
                answers = texts
                if is_conversational({"prompt": prompts[0]}):
                    answers = [[{"role": "assistant", "content": a}] for a in answers]
                scores = torch.tensor(self.judge.checked_scores(prompts * size, answers))
                scores = missing_eos_penalty(scores, has_eos.cpu(), self.args.missing_eos_penalty)
                rankings = [ranking_from_scores(scores[i::count].tolist()) for i in range(count)]
            elif isinstance(self.judge, RankAsPairwiseJudge) and size > 2:
                ranked = self.judge.rank_judge.judge([plain_text(p) for p in prompts], groups)
                rankings = check_rankings(ranked, [size] * count, name)
            else:  # a pairwise judge: num_generations is 2 (OnlineDPOTrainer checks it)
                verdicts = self.judge.judge([plain_text(p) for p in prompts], groups)
                rankings = [[] if v == TIE else [v, 1 - v] for v in check_pairwise_verdicts(verdicts, count, name)]
        except JudgeError as error:
            raise JudgeError(f"{error} (at step {step})") from error
        except Exception as error:
            raise JudgeError(f"judge {name!r} failed at step {step}: {type(error).__name__}: {error}") from error
        chosen = [chosen_pair(ranking, size) for ranking in rankings]
        pairs = [(first, second) for first, second, _ in chosen]
        verdicts = torch.tensor([verdict for _, _, verdict in chosen])
        if scores is not None:
            scores = torch.cat([scores[torch.tensor([a * count + i for i, (a, _) in enumerate(pairs)])],
                                scores[torch.tensor([b * count + i for i, (_, b) in enumerate(pairs)])]])
        return pairs, verdicts, scores

    def _judge_confidence(self, count: int) -> torch.Tensor | None:
        """With soft_judgements, the judge's probability that each of the `count` prompts' chosen answers is the
        better (its `last_confidence` after judging; a rank judge's through the pairwise wrapper), else None (sure).
        A judge that gives the wrong number or a value outside [0, 1] stops the run, named."""
        judge = getattr(self.judge, "rank_judge", self.judge)
        values = getattr(judge, "last_confidence", None) if self.args.soft_judgements else None
        if values is None:
            return None
        values = [float(v) for v in values]
        if len(values) != count or not all(0.0 <= v <= 1.0 for v in values):
            raise JudgeError(f"judge {judge_name(self.judge)!r} gave last_confidence={values!r} at step "
                             f"{self.state.global_step + 1}: expected {count} probabilities in [0, 1]")
        return torch.tensor(values)

    # ---- 3. tensors and the reference's log-probs -------------------------------------------------------------
    def _token_logps(self, model, batch: dict) -> torch.Tensor:
        """Per-token log-probs (N, C) of the answers under `model` (0 on padding)."""
        with self.accelerator.autocast():
            logits = self._completion_logits(model, batch)  # (N, C, V)
        logps = selective_log_softmax(logits, batch["completion_ids"])  # (N, C)
        return logps * batch["completion_mask"]

    @torch.no_grad()
    def _reference_token_logps(self, batch: dict) -> torch.Tensor:
        if self.ref_model is not None:
            return self._token_logps(self.ref_model, batch)
        policy = self.accelerator.unwrap_model(self.model)
        with policy.disable_adapter():  # LoRA: the base model is the reference
            return self._token_logps(self.model, batch)

    def _generate_and_judge(self, rows: list[dict]) -> dict:
        """A batch of pairs from prompt rows: two answers to each, the judge's verdicts, the reference's
        log-probs."""
        prompts = [row["prompt"] for row in rows]
        device = self.accelerator.device
        # 1. num_generations answers per prompt (two: TRL's online DPO)
        prompt_ids = self._prompt_ids(prompts)
        generated = self._generate_group(prompt_ids)  # answer k of prompt i at k * B + i
        group = [a.tolist() for a in generated]
        group_eos = torch.tensor([len(a) > 0 and a[-1] in self.eos_ids for a in group])
        # 2. the judge picks each prompt's pair and says which of it is better
        texts = self.processing_class.batch_decode(generated, skip_special_tokens=True)
        pairs, verdicts, scores = self._judge(prompts, texts, group_eos)
        count = len(prompts)
        confidence = self._judge_confidence(count)
        rows = [a * count + i for i, (a, _) in enumerate(pairs)] + [b * count + i for i, (_, b) in enumerate(pairs)]
        answers = [group[r] for r in rows]  # [first; second]: 2B rows
        has_eos = group_eos[torch.tensor(rows)]
        # A judge's own statistics (a `last_stats` dict of floats, as rlhf.rewards' sources keep) are logged too.
        for name, value in (getattr(self.judge, "last_stats", None) or {}).items():
            self._metrics[self._mode()][name].append(float(value))
        # 3. tensors: prompts left padded, answers right padded; the reference's log-probs
        pad = self.processing_class.pad_token_id
        prompt_tensor, prompt_mask = left_pad(prompt_ids + prompt_ids, pad)
        batch = {
            "prompt_ids": prompt_tensor.to(device), "prompt_mask": prompt_mask.to(device),
            "completion_ids": pad_token_lists(answers, pad).to(device),
            "completion_mask": pad_token_lists([[1] * len(a) for a in answers], 0).to(device),
            "verdicts": verdicts.to(device), "has_eos": has_eos.to(device),
        }
        if scores is not None:
            batch["scores"] = scores.to(device)
        if confidence is not None:
            batch["confidence"] = confidence.to(device)
        if self.reference_scores_second:
            batch["ref_token_logps"] = self._reference_token_logps(batch)
        else:
            half = len(prompts)
            batch["ref_token_logps"] = self._reference_token_logps(
                {k: batch[k][:half] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")})
        return batch

    # ---- 4. the loss ---------------------------------------------------------------------------------------------
    def compute_loss(self, model, inputs: dict, return_outputs: bool = False, num_items_in_batch=None):
        if return_outputs:
            raise ValueError(f"The {self._name}Trainer does not support returning outputs")
        token_logps = self._token_logps(model, inputs)  # (2B, C)
        logps, ref_logps = token_logps.sum(-1), inputs["ref_token_logps"].sum(-1)  # (2B,)
        batch_size = len(inputs["verdicts"])
        chosen, rejected, weight = chosen_rejected_rows(inputs["verdicts"], batch_size)
        beta = self.beta
        losses = online_dpo_losses(logps[chosen], logps[rejected], ref_logps[chosen], ref_logps[rejected], beta,
                                   self.args.loss_type, inputs.get("confidence"))
        loss = weighted_mean(losses, weight) + self.extra_loss(inputs, token_logps)
        self._log_pair_metrics(inputs, token_logps, chosen, rejected, weight, beta)
        return loss

    def spent_kl_budget(self, step: int) -> bool:
        """Ends the optimizer step `step` for the KL budget: records its KL and says whether the budget is spent.
        Every process reaches the same answer (the KL is averaged over them first), so all stop together."""
        kls, self._micro_step_kls = self._micro_step_kls, []
        local = sum(kls) / len(kls) if kls else 0.0
        self.step_kls.append(self.accelerator.reduce(torch.tensor(local, device=self.accelerator.device),
                                                     reduction="mean").item())
        if not kl_budget_spent(self.step_kls, self.args.kl_budget, KL_BUDGET_WINDOW):
            return False
        self.kl_budget_spent_at = step
        self._metrics["train"]["kl_budget/spent_at_step"].append(float(step))
        return True

    def extra_loss(self, inputs: dict, token_logps: torch.Tensor) -> torch.Tensor | float:
        """A term added to the DPO loss (XPO's exploration term); none in online DPO."""
        return 0.0

    def _log_pair_metrics(self, inputs, token_logps, chosen, rejected, weight, beta) -> None:
        metrics = self._metrics[self._mode()]
        logps = token_logps.detach().sum(-1)
        ref_logps = inputs["ref_token_logps"].sum(-1)
        kl = logps - ref_logps  # (2B,): summed log-ratio of each sampled answer (TRL's objective/kl)
        metrics["objective/kl"].append(kl.mean().item())
        if self.model.training:
            self._micro_step_kls.append(kl.mean().item())
        metrics["objective/entropy"].append((-logps).mean().item())
        metrics["objective/non_score_reward"].append((-beta * kl).mean().item())
        if "scores" in inputs:
            scores = inputs["scores"]
            metrics["objective/scores"].append(scores.mean().item())
            metrics["objective/scores_margin"].append((scores[chosen] - scores[rejected]).mean().item())
            metrics["objective/rlhf_reward"].append((scores - beta * kl).mean().item())
        judged = weight > 0
        if judged.any():
            chosen_rewards = beta * (logps[chosen] - ref_logps[chosen])[judged]
            rejected_rewards = beta * (logps[rejected] - ref_logps[rejected])[judged]
            metrics["rewards/chosen"].append(chosen_rewards.mean().item())
            metrics["rewards/rejected"].append(rejected_rewards.mean().item())
            metrics["rewards/accuracies"].append((chosen_rewards > rejected_rewards).float().mean().item())
            metrics["rewards/margins"].append((chosen_rewards - rejected_rewards).mean().item())
            metrics["logps/chosen"].append(logps[chosen][judged].mean().item())
            metrics["logps/rejected"].append(logps[rejected][judged].mean().item())
        metrics["judge/ties"].append((~judged).float().mean().item())
        if "confidence" in inputs and judged.any():
            metrics["judge/confidence"].append(inputs["confidence"][judged].mean().item())
        metrics["val/contain_eos_token"].append(inputs["has_eos"].float().mean().item())
        metrics["completions/mean_length"].append(inputs["completion_mask"].sum(-1).float().mean().item())
        metrics["beta"].append(beta)


__all__ = ["KLBudgetCallback", "OnlineDPOConfig", "OnlineDPOTrainer", "check_schedule", "load_object", "plain_text", "resolve_judge",
           "split_pair_batch"]
