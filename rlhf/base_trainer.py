"""The plumbing every transformers.Trainer subclass here shares (SFT, Reward, DPO, KTO, GRPO, RLOO), so each trainer's
module holds only its algorithm:

- `_policy_and_tokenizer`: the model to train and its tokenizer, loaded when given by name (safetensors, an adapter
  folder merged), the pad token set, and the CPU allocator setting applied first;
- `_checked_args`: the config given (TypeError for another trainer's), or the trainer's default one;
- `_reference_model`: the reference loaded when given by name, or a copy of the policy, frozen;
- `_place_reference`: the frozen reference placed (and under ZeRO-3 / FSDP sharded) as the policy is;
- `for_each_dataset`: one preparation applied to a dataset or to each of a dict of them (eval_dataset);
- for the trainers that generate (GRPO, RLOO, online DPO, XPO, Nash-MD): `_generating_policy` (left padding),
  `check_prompt_columns`, `_set_generation_ids`, `_cut_after_eos` and `_completion_logits` (the logits that score
  an answer);
- the metric buffer: compute_loss appends per-step values to `self._metrics[mode][name]`, and `log` averages each
  name over the steps since the last log (eval_ prefixed in evaluation); `evaluate` returns them too;
- `prediction_step` for trainers whose evaluation is their loss and logged metrics (no logits).

The model steps themselves (LoRA, attention kernel, dropout, freezing the reference) are in rlhf/trainer_setup.py.
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Callable

import torch
from transformers import Trainer

from rlhf.cpu_memory import keep_freed_memory
from rlhf.distributed import prepare_reference
from rlhf.generation import eos_token_ids
from rlhf.loading import load_causal_lm, load_tokenizer, resolve_model_path
from rlhf.logps import accepts_logits_to_keep
from rlhf.peft_utils import merge_adapter
from rlhf.precision import cast_matmul_weights, copy_in_dtype, model_load_kwargs, trainer_reference_dtype
from rlhf.trainer_setup import freeze_reference, load_reference


def for_each_dataset(prepare: Callable, dataset):
    """prepare(dataset), or {name: prepare(d)} for a dict of them (Trainer evaluates each of a dict's datasets)."""
    if isinstance(dataset, dict):
        return {k: prepare(v) for k, v in dataset.items()}
    return prepare(dataset)


def check_prompt_columns(**datasets) -> None:
    """ValueError naming the split whose rows have no 'prompt' column (a dict of datasets is checked by the Trainer)."""
    for split, dataset in datasets.items():
        if dataset is not None and not isinstance(dataset, dict) and "prompt" not in dataset.column_names:
            raise ValueError(f"{split}: needs a 'prompt' column (columns: {dataset.column_names})")


class BaseTrainer(Trainer):
    """transformers.Trainer plus the shared plumbing above. A subclass sets the class attributes below, builds its
    model with `_policy_and_tokenizer` before calling `super().__init__`, and records metrics in `self._metrics`."""

    _name = "Base"  # "<_name>Trainer" in error messages: SFT, Reward, DPO, KTO, GRPO, RLOO
    load_pretrained = staticmethod(load_causal_lm)  # how a model given by name is loaded
    padding_side = "right"  # of a tokenizer loaded here
    pad_token_fallbacks = ("eos_token",)  # the tokenizer's first token of these that is set becomes its pad token
    # Whether evaluate() returns the metrics its log averaged (eval_rewards/... beside eval_loss). SFT and DPO do;
    # KTO and GRPO return Trainer.evaluate's own dict, as TRL's do.
    evaluate_returns_logged_metrics = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._metrics: dict[str, dict[str, list[float]]] = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._last_eval_metrics: dict[str, float] = {}

    # ---- the config -----------------------------------------------------------------------------------------
    config_class: type | None = None  # the config this trainer takes (set by the trainers that check it)

    def _default_args(self, model):
        return self.config_class()

    def _checked_args(self, args, model=None):
        """The config given, or this trainer's default one; TypeError for another trainer's config."""
        if args is None:
            args = self._default_args(model)
        if not isinstance(args, self.config_class):
            raise TypeError(f"{self._name}Trainer: args must be a {self.config_class.__name__}, got {type(args).__name__}")
        return args

    # ---- the policy, its tokenizer and the reference -------------------------------------------------------
    @classmethod
    def _policy_and_tokenizer(cls, model, args, processing_class, peft_config):
        """(model, tokenizer): `model` loaded when it is a name or path (None: args.model_name_or_path), its tokenizer
        loaded beside it unless one is given, with a pad token. Called before Trainer.__init__, once the config is
        final; the CPU allocator setting is applied first, before the weights are allocated."""
        if args.keep_freed_memory and not torch.cuda.is_available():
            keep_freed_memory()
        if model is None or isinstance(model, (str, os.PathLike)):
            name = resolve_model_path(model if model is not None else args.model_name_or_path)
            model = merge_adapter(cls.load_pretrained(name, **model_load_kwargs(args, lora=peft_config is not None)))
            if processing_class is None:
                processing_class = load_tokenizer(name, padding_side=cls.padding_side)
        if processing_class is None:
            raise ValueError(f"{cls._name}Trainer needs processing_class (the tokenizer) when given a model object")
        if processing_class.pad_token is None:
            processing_class.pad_token = next(
                (getattr(processing_class, n) for n in cls.pad_token_fallbacks if getattr(processing_class, n)), None)
        return model, processing_class

    @classmethod
    def _generating_policy(cls, model, args, processing_class, peft_config):
        """_policy_and_tokenizer with the tokenizer padding on the left (generation continues from the last prompt
        token), whoever loaded it, and the model told the pad id."""
        model, processing_class = cls._policy_and_tokenizer(model, args, processing_class, peft_config)
        processing_class.padding_side = "left"
        model.config.pad_token_id = processing_class.pad_token_id
        return model, processing_class

    @staticmethod
    def _reference_model(ref_model, args, copy_of: torch.nn.Module | None = None) -> torch.nn.Module | None:
        """The reference, frozen: `ref_model` (loaded when a name or path), else a copy of `copy_of` taken now (before
        any training or resume), else None (no reference: the policy with its adapter off serves, or none is needed)."""
        # In a bf16 run the reference keeps its matmul weights in bf16 (autocast casts them on every forward anyway):
        # half the memory of an fp32 copy, the same log-probs (rlhf/precision.py copy_in_dtype).
        dtype = trainer_reference_dtype(args)
        if isinstance(ref_model, (str, os.PathLike)):
            ref_model = cast_matmul_weights(load_reference(ref_model, args), dtype)
        if ref_model is None and copy_of is not None:
            ref_model = copy_in_dtype(copy_of, dtype)
        return freeze_reference(ref_model, args) if ref_model is not None else None

    def _place_reference(self, ref_model: torch.nn.Module | None) -> None:
        """self.ref_model: placed and sharded as the policy is, not moved with .to(device) (TRL 0.11); None stays None.
        Called after Trainer.__init__ (it needs the accelerator)."""
        self.ref_model = prepare_reference(self.accelerator, ref_model) if ref_model is not None else None

    # ---- generation ------------------------------------------------------------------------------------------
    def _set_generation_ids(self, model, processing_class) -> None:
        """The ids that end an answer, and whether the model can skip the prompt's logits (logits_to_keep)."""
        self.eos_ids = eos_token_ids(model, processing_class)
        self._accepts_logits_to_keep = accepts_logits_to_keep(model)

    def _completion_logits(self, model, batch: dict, **forward_kwargs) -> torch.Tensor:
        """The logits (B, C, V) that predict each completion token of a batch of left-padded prompts and right-padded
        completions; called under autocast. Positions count real tokens only, as generate() counted them on the
        left-padded prompts, so a row's tokens get the log-probs they were sampled with."""
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep = batch["completion_ids"].shape[1]
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        # Logits only from the token before the first completion token on: the prompt's would be thrown away.
        if self._accepts_logits_to_keep:
            logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           logits_to_keep=keep + 1, **forward_kwargs).logits
        else:
            logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           **forward_kwargs).logits[:, -(keep + 1):]
        return logits[:, :-1]  # (B, C, V)

    def _cut_after_eos(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Each generated row up to and including its first end-of-answer token (whole when it has none)."""
        eos = torch.tensor(self.eos_ids, device=rows.device)
        out = []
        for row in rows:
            ends = torch.isin(row, eos).nonzero()
            out.append(row[: int(ends[0]) + 1] if len(ends) else row)
        return out

    # ---- the metric buffer -----------------------------------------------------------------------------------
    def _mode(self) -> str:
        # Evaluation runs with the model in eval mode, so the mode tells train logs from eval logs.
        return "train" if self.model.training else "eval"

    def _logs_take_metrics(self, logs: dict[str, float]) -> bool:
        """Whether this log call ends a logging window (and so gets the buffer's means). Every call does here."""
        return True

    @staticmethod
    def _average(values: list[float]) -> float | None:
        return sum(values) / len(values)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = self._mode()
        if self._logs_take_metrics(logs):
            prefix = "eval_" if mode == "eval" else ""
            metrics = {f"{prefix}{k}": self._average(v) for k, v in self._metrics[mode].items() if v}
            self._metrics[mode].clear()
            if mode == "eval":
                self._last_eval_metrics = metrics
            logs = {**logs, **metrics}
        super().log(logs, start_time)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        # Trainer.evaluate returns only what compute_metrics gives; add the metrics that log() averaged.
        self._last_eval_metrics = {}
        output = super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        return {**output, **self._last_eval_metrics} if self.evaluate_returns_logged_metrics else output

    def prediction_step(self, model, inputs, prediction_loss_only: bool, ignore_keys=None):
        # The loss alone: evaluation's numbers are the loss and what compute_loss put in the buffer.
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None


__all__ = ["BaseTrainer", "check_prompt_columns", "for_each_dataset"]
