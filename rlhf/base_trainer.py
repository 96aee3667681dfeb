"""The plumbing every transformers.Trainer subclass here shares (SFT, Reward, DPO, KTO, GRPO, RLOO), so each trainer's
module holds only its algorithm:

- `_policy_and_tokenizer`: the model to train and its tokenizer, loaded when given by name (safetensors, an adapter
  folder merged), the pad token set, and the CPU allocator setting applied first;
- `_place_reference`: the frozen reference placed (and under ZeRO-3 / FSDP sharded) as the policy is;
- the metric buffer: compute_loss appends per-step values to `self._metrics[mode][name]`, and `log` averages each
  name over the steps since the last log (eval_ prefixed in evaluation); `evaluate` returns them too;
- `prediction_step` for trainers whose evaluation is their loss and logged metrics (no logits).

The model steps themselves (LoRA, attention kernel, dropout, freezing the reference) are in rlhf/trainer_setup.py.
"""
from __future__ import annotations

import os
from collections import defaultdict

import torch
from transformers import Trainer

from rlhf.cpu_memory import keep_freed_memory
from rlhf.distributed import prepare_reference
from rlhf.loading import load_causal_lm, load_tokenizer, resolve_model_path
from rlhf.peft_utils import merge_adapter
from rlhf.precision import model_load_kwargs


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

    def _place_reference(self, ref_model: torch.nn.Module | None) -> None:
        """self.ref_model: placed and sharded as the policy is, not moved with .to(device) (TRL 0.11); None stays None.
        Called after Trainer.__init__ (it needs the accelerator)."""
        self.ref_model = prepare_reference(self.accelerator, ref_model) if ref_model is not None else None

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


__all__ = ["BaseTrainer"]
