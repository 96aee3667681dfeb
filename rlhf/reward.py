"""Reward model training (pairwise Bradley-Terry) on transformers.Trainer, and a scorer for the result.

    trainer = RewardTrainer("default-encoder", args=RewardConfig(output_dir="rm"), train_dataset=prefs)
    trainer.train(); trainer.save_model()
    RewardScorer("rm").score(["Review:"], ["A good film."])  # -> [0.83]

Any encoder or decoder works through AutoModelForSequenceClassification(num_labels=1). Encoders without
an EOS token (the bundled MiniLM) read (prompt, response) as a text pair; decoders read prompt + response
and are pooled on their last non-pad token (config.pad_token_id must be set, which we do).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, EvalPrediction

from rlhf.base_trainer import BaseTrainer
from rlhf.data import (
    RewardCollator,
    check_preference_rows,
    pad_token_lists,
    render_prompt_completion,
    tokenize_for_reward,
    tokenize_preference_reward,
    tokenizer_alias,
)
from rlhf.loading import DEFAULT_ENCODER, load_tokenizer, resolve_model_path
from rlhf.losses import pairwise_reward_loss
from rlhf.trainer_config import TrainerConfig
from rlhf.trainer_setup import disable_dropout, prepare_model


# The reward model's score statistics on the answers it was trained on (chosen and rejected: the base policy's
# answers when people labelled its samples), saved beside the weights. A Bradley-Terry model's scores have an
# arbitrary offset and scale (only differences are trained), so PPO standardises them with these before adding
# the KL penalty: one KL coefficient then fits every reward model (Ziegler et al. 2019 normalise the same way,
# on samples of the initial policy).
SCORE_STATS_FILE = "score_stats.json"


def read_score_stats(folder: str | os.PathLike) -> dict[str, float] | None:
    """{'mean', 'std', 'count'} saved by RewardTrainer.save_model, or None for a model saved without them."""
    path = Path(folder) / SCORE_STATS_FILE
    return json.loads(path.read_text()) if path.exists() else None


@dataclass
class RewardConfig(TrainerConfig):
    """TrainerConfig (TrainingArguments and the shared CPU settings) plus the reward model's own fields;
    defaults suit a small CPU run."""

    model_name_or_path: str = field(
        default=DEFAULT_ENCODER, metadata={"help": "Backbone when the trainer is given a name: 'default-encoder', 'default', a folder."}
    )
    max_length: int | None = field(default=512, metadata={"help": "Tokens per (prompt, response); longer inputs are truncated."})
    center_rewards_coefficient: float = field(
        default=0.0, metadata={"help": "Weight of mean((r_chosen + r_rejected)^2), keeping rewards centred on 0 (0: off)."}
    )
    disable_dropout: bool = field(
        default=True, metadata={"help": "Set every dropout probability to 0, as TRL's RewardTrainer does by default (on CPU, dropout's random masks took ~17% of a MiniLM step)."}
    )
    save_score_stats: bool = field(
        default=True, metadata={"help": f"With the final model, save the mean and std of its scores on the training answers ({SCORE_STATS_FILE}), so PPO can standardise them."}
    )
    # TrainingArguments fields whose defaults we change for small CPU runs:
    output_dir: str | None = field(default="reward-model", metadata={"help": "Where checkpoints and the final model go."})
    learning_rate: float = field(default=5e-5, metadata={"help": "AdamW learning rate."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Preference pairs per step (2x sequences)."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Passes over the training pairs (TRL's default; a few hundred pairs need more than one)."})
    logging_steps: float = field(default=5, metadata={"help": "Log metrics every this many steps."})
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Keep False: the collator needs the tokenised columns the model does not take."}
    )

    def __post_init__(self):
        if self.center_rewards_coefficient < 0:
            raise ValueError(f"center_rewards_coefficient={self.center_rewards_coefficient!r}: must be >= 0")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length={self.max_length!r}: must be at least 2")
        super().__post_init__()


def reward_accuracy(pred: EvalPrediction) -> dict[str, float]:
    """Eval metrics from (B, 2) predictions [r_chosen, r_rejected]: ties count as wrong."""
    rewards = np.asarray(pred.predictions)
    chosen, rejected = rewards[:, 0], rewards[:, 1]
    return {"accuracy": float(np.mean(chosen > rejected)), "margin": float(np.mean(chosen - rejected))}


def load_reward_model(name_or_path: str | os.PathLike, dtype=None, **kwargs) -> torch.nn.Module:
    """A one-output sequence classifier from safetensors; an adapter folder is loaded on its base. dtype None:
    float32 (not the checkpoint's dtype, transformers 5's reading of None; rlhf/precision.py says why)."""
    path = Path(resolve_model_path(name_or_path))
    dtype = torch.float32 if dtype is None else dtype
    adapter_config = path / "adapter_config.json"
    if adapter_config.exists():
        from peft import PeftModel

        base_name = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        base = AutoModelForSequenceClassification.from_pretrained(
            resolve_model_path(base_name), num_labels=1, dtype=dtype, use_safetensors=True, **kwargs
        )
        return PeftModel.from_pretrained(base, path)
    return AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1, dtype=dtype, use_safetensors=True,
                                                              **kwargs)


class RewardTrainer(BaseTrainer):
    """Trains r(prompt, response) so that r(chosen) > r(rejected) on each pair.

    Data: a datasets.Dataset with prompt/chosen/rejected [+ margin], standard or conversational.
    Logged (train): loss, accuracy, margin, rewards/chosen, rewards/rejected. Eval: eval_accuracy, eval_margin.
    """

    # Our loss is a mean over the batch's pairs, so the Trainer must divide it for gradient accumulation.
    loss_is_scaled_for_ga = False
    _name = "Reward"
    load_pretrained = staticmethod(load_reward_model)
    pad_token_fallbacks = ("eos_token", "sep_token")  # encoders such as MiniLM have no EOS

    def __init__(
        self,
        model: torch.nn.Module | str | None = None,
        args: RewardConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        peft_config=None,
        callbacks=None,
        compute_metrics=None,
        optimizers=(None, None),
        tokenizer=None,
        data_collator=None,
        preprocess_logits_for_metrics=None,
    ):
        """`tokenizer=` is TRL 0.11's name for processing_class; data_collator, compute_metrics, callbacks,
        optimizers and preprocess_logits_for_metrics pass through to transformers.Trainer (a data_collator
        receives the tokenised rows and replaces ours)."""
        processing_class = tokenizer_alias(processing_class, tokenizer, "RewardTrainer")
        args = args if args is not None else RewardConfig()
        model, processing_class = self._policy_and_tokenizer(model, args, processing_class, peft_config)
        processing_class.padding_side = "right"
        # Decoders pool the last token that is not pad_token_id; without it they cannot batch.
        if model.config.pad_token_id is None:
            model.config.pad_token_id = processing_class.pad_token_id
        if args.disable_dropout:
            disable_dropout(model)
        model = prepare_model(model, args, peft_config)

        train_dataset = self._tokenize(train_dataset, processing_class, args.max_length)
        if isinstance(eval_dataset, dict):
            eval_dataset = {k: self._tokenize(v, processing_class, args.max_length) for k, v in eval_dataset.items()}
        else:
            eval_dataset = self._tokenize(eval_dataset, processing_class, args.max_length)
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator or RewardCollator(processing_class.pad_token_id),
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics if compute_metrics is not None else reward_accuracy,
            callbacks=callbacks,
            optimizers=optimizers,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        )

    @staticmethod
    def _tokenize(dataset, tokenizer, max_length):
        if dataset is None:
            return None
        check_preference_rows(dataset)
        drop = [c for c in dataset.column_names if c != "margin"]
        return dataset.map(tokenize_preference_reward, fn_kwargs={"tokenizer": tokenizer, "max_length": max_length}, remove_columns=drop)

    def compute_loss(self, model, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch=None):
        margin = inputs.get("margin")
        model_inputs = {k: v for k, v in inputs.items() if k != "margin"}
        # One forward pass over [chosen; rejected] concatenated on dim 0, split with chunk(2).
        rewards = model(**model_inputs).logits.squeeze(-1).float()  # (2B,)
        r_chosen, r_rejected = rewards.chunk(2)  # (B,), (B,)
        loss = pairwise_reward_loss(r_chosen, r_rejected, margin, self.args.center_rewards_coefficient)
        if model.training:  # evaluation's accuracy and margin come from compute_metrics (reward_accuracy)
            with torch.no_grad():
                self._metrics["train"]["accuracy"].append((r_chosen > r_rejected).float().mean().item())
                self._metrics["train"]["margin"].append((r_chosen - r_rejected).mean().item())
                self._metrics["train"]["rewards/chosen"].append(r_chosen.mean().item())
                self._metrics["train"]["rewards/rejected"].append(r_rejected.mean().item())
        if return_outputs:
            return loss, {"rewards_chosen": r_chosen, "rewards_rejected": r_rejected}
        return loss

    def prediction_step(self, model, inputs, prediction_loss_only: bool, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss, outputs = self.compute_loss(model, inputs, return_outputs=True)
        if prediction_loss_only:
            return loss.detach(), None, None
        logits = torch.stack([outputs["rewards_chosen"], outputs["rewards_rejected"]], dim=1)  # (B, 2)
        return loss.detach(), logits, torch.zeros(len(logits), device=logits.device)

    def score_stats(self, dataset=None) -> dict[str, float]:
        """Mean and std of the model's scores over every chosen and rejected answer of `dataset` (default: the
        training set). Runs on every rank (predict gathers the shards)."""
        predictions = self.predict(dataset if dataset is not None else self.train_dataset).predictions  # (B, 2)
        scores = np.asarray(predictions, dtype=np.float64).reshape(-1)
        return {"mean": float(scores.mean()), "std": float(scores.std()), "count": int(scores.size)}

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """The Trainer's save, plus score_stats.json for a final save (not for checkpoints) when the config
        asks for it and a training set is present."""
        super().save_model(output_dir, _internal_call)
        if _internal_call or not self.args.save_score_stats or self.train_dataset is None:
            return
        stats = self.score_stats()  # every rank: predict is collective
        if self.is_world_process_zero():
            folder = Path(output_dir or self.args.output_dir)
            (folder / SCORE_STATS_FILE).write_text(json.dumps(stats, indent=2) + "\n")

    def _logs_take_metrics(self, logs: dict[str, float]) -> bool:
        # Only the periodic train logs (with "loss"): steps after the last one are not folded into the end summary.
        return "loss" in logs


class RewardScorer:
    """Scores (prompt, response) pairs with a trained reward model folder (full model or adapter).

    Prompts and responses are strings or message lists, encoded exactly as in training.

    Inference only: eval mode (no dropout), no gradients (requires_grad off, scoring under no_grad), so it holds
    its weights and one batch's activations and nothing else. `dtype=torch.bfloat16` halves the weights (2 bytes
    a parameter; PPO passes it when the run trains in bf16); scores then carry bf16's ~3 significant digits.
    `device` None: "cuda" (under accelerate, each rank's own GPU: accelerate sets the current device) or the CPU.
    """

    def __init__(self, name_or_path: str | os.PathLike, device: str | torch.device | None = None,
                 max_length: int | None = 512, dtype: torch.dtype | None = None):
        path = resolve_model_path(name_or_path)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = load_reward_model(path, dtype=dtype).to(self.device).eval().requires_grad_(False)
        tokenizer_dir = path
        if not (Path(path) / "tokenizer_config.json").exists() and (Path(path) / "adapter_config.json").exists():
            tokenizer_dir = resolve_model_path(json.loads((Path(path) / "adapter_config.json").read_text())["base_model_name_or_path"])
        self.tokenizer = load_tokenizer(tokenizer_dir, padding_side="right")
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.max_length = max_length
        self.collator = RewardCollator(self.tokenizer.pad_token_id)
        self.score_stats = read_score_stats(path)  # None for a model saved without them

    @torch.no_grad()
    def score(self, prompts: list[Any], responses: list[Any], batch_size: int = 16) -> list[float]:
        if len(prompts) != len(responses):
            raise ValueError(f"score: {len(prompts)} prompts but {len(responses)} responses")
        scores: list[float] = []
        for start in range(0, len(prompts), batch_size):
            rows = []
            for prompt, response in zip(prompts[start : start + batch_size], responses[start : start + batch_size]):
                prompt_text, response_text = render_prompt_completion(self.tokenizer, prompt, response)
                rows.append(tokenize_for_reward(self.tokenizer, prompt_text, response_text, self.max_length))
            batch = self._pad(rows)
            logits = self.model(**batch).logits.squeeze(-1).float()  # (b,)
            scores.extend(logits.tolist())
        return scores

    def _pad(self, rows: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        batch = {}
        for key in rows[0]:
            batch[key] = pad_token_lists([r[key] for r in rows], self.tokenizer.pad_token_id if key == "input_ids" else 0).to(self.device)
        return batch


__all__ = ["SCORE_STATS_FILE", "RewardConfig", "RewardTrainer", "RewardScorer", "load_reward_model", "read_score_stats",
           "reward_accuracy"]
