"""Kahneman-Tversky Optimization (Ethayarajh et al. 2024) on transformers.Trainer, with TRL 1.16's KTOTrainer API.

    trainer = KTOTrainer("default", args=KTOConfig(output_dir="kto"), train_dataset=rows)
    trainer.train(); trainer.save_model()

Rows are TRL's unpaired format: prompt, completion, label (True: desirable), standard or conversational; paired
prompt/chosen/rejected rows are unpaired first (chosen -> True, rejected -> False), as TRL does. KTO's reference
point, the KL of the policy to the reference, is estimated on mismatched pairs: within each batch of
per_device_train_batch_size rows, prompt i is paired with completion i - 1 (TRL's rotation, made once when the
data is tokenised; the sampler is sequential so batches are exactly those rows). The loss is rlhf/losses.kto_loss.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from rlhf.base_trainer import BaseTrainer
from rlhf.data import (
    DataError,
    check_text,
    is_conversational,
    pad_token_lists,
    render_prompt_completion,
    tokenize_pair,
    tokenizer_alias,
)
from rlhf.loading import DEFAULT_POLICY
from rlhf.logps import completion_logps
from rlhf.losses import kto_kl_estimate, kto_loss
from rlhf.peft_utils import is_peft_model
from rlhf.precision import cast_matmul_weights, copy_in_dtype, trainer_reference_dtype
from rlhf.reference_logps import reference_model, with_reference_columns
from rlhf.trainer_config import TrainerConfig, refuse_trl_only_values, trl_only
from rlhf.trainer_setup import disable_dropout, freeze_reference, load_reference, prepare_model

KTO_LOSS_TYPES = ("kto", "apo_zero_unpaired")


@dataclass
class KTOConfig(TrainerConfig):
    """TRL 1.16's KTOConfig (its names and defaults, except activation checkpointing: transformers' default, off)."""

    model_name_or_path: str = field(
        default=DEFAULT_POLICY, metadata={"help": "Policy when the trainer is given no model: 'default', a folder, an adapter folder."})
    learning_rate: float = field(default=1e-6, metadata={"help": "AdamW learning rate (TRL's default 1e-6)."})
    logging_steps: float = field(default=10, metadata={"help": "Log metrics every this many optimizer steps."})
    train_sampling_strategy: str = field(default="sequential", metadata={
        "help": "sequential (TRL's KTO default): batches are the rows the KL pairs were rotated within."})
    disable_dropout: bool = field(default=True, metadata={"help": "Set every dropout probability to 0."})
    dataset_num_proc: int | None = field(default=None, metadata={"help": "Processes for tokenising the dataset."})
    max_length: int | None = field(default=1024, metadata={"help": "Tokens per prompt + completion; the completion is cut at the end."})
    precompute_ref_log_probs: bool = field(default=False, metadata={
        "help": "Run the reference once over the data before training and cache its log-probs (no reference copy kept)."})
    precompute_ref_batch_size: int | None = field(default=None, metadata={
        "help": "Batch size of that pass (None: per_device_train_batch_size / per_device_eval_batch_size)."})
    loss_type: str = field(default="kto", metadata={
        "help": "kto: the KTO loss with its KL reference point; apo_zero_unpaired: APO-zero, unpaired (no KL term)."})
    beta: float = field(default=0.1, metadata={"help": "How far the policy may move from the reference (higher: less)."})
    desirable_weight: float = field(default=1.0, metadata={"help": "Weight of the desirable examples' losses."})
    undesirable_weight: float = field(default=1.0, metadata={"help": "Weight of the undesirable examples' losses."})
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Keep False: the collator needs the tokenised columns the model does not take."})
    pad_to_multiple_of: int | str | None = trl_only("auto", "shapes are never padded to a multiple (that helps compiled accelerators only)")
    trust_remote_code: bool = trl_only(False, "models are loaded from safetensors without custom code (rlhf/loading.py)")
    router_aux_loss_coef: float | None = trl_only(None, "Mixture-of-Experts auxiliary losses are not wired in")
    activation_offloading: bool = trl_only(False, "activation offloading moves activations to CPU memory, where they already are")
    sync_ref_model: bool = trl_only(False, "TR-DPO reference syncing is not implemented")
    ref_model_mixup_alpha: float = trl_only(0.6, "only used with sync_ref_model")
    ref_model_sync_steps: int = trl_only(512, "only used with sync_ref_model")

    def __post_init__(self):
        refuse_trl_only_values(self)
        if self.loss_type not in KTO_LOSS_TYPES:
            raise ValueError(f"loss_type={self.loss_type!r}: must be one of {', '.join(KTO_LOSS_TYPES)}")
        if self.beta <= 0:
            raise ValueError(f"beta={self.beta!r}: must be positive")
        if self.desirable_weight < 0 or self.undesirable_weight < 0:
            raise ValueError(f"desirable_weight={self.desirable_weight!r}, undesirable_weight={self.undesirable_weight!r}: must be >= 0")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length={self.max_length!r}: must be at least 2")
        super().__post_init__()


def unpaired_rows(dataset):
    """prompt/chosen/rejected rows -> prompt/completion/label rows (chosen True, rejected False); unpaired rows
    are checked and returned as they are. Raises DataError naming the first bad row."""
    columns = set(dataset.column_names)
    if {"chosen", "rejected"} <= columns and "completion" not in columns:
        from datasets import Dataset

        rows = [{"prompt": r["prompt"], "completion": r[k], "label": k == "chosen"}
                for r in dataset for k in ("chosen", "rejected")]
        dataset = Dataset.from_list(rows)
    elif not {"prompt", "completion", "label"} <= columns:
        raise DataError(f"KTO data needs columns prompt, completion, label (or prompt, chosen, rejected); got {sorted(columns)}")
    for i, row in enumerate(dataset):
        kinds = {check_text(row["prompt"], i, "prompt"), check_text(row["completion"], i, "completion")}
        if len(kinds) > 1:
            raise DataError("prompt and completion must both be text or both be message lists", i, "completion")
        if not isinstance(row["label"], bool):
            raise DataError(f"must be true or false, got {row['label']!r}", i, "label")
    return dataset


def tokenize_unpaired(example: dict[str, Any], tokenizer, max_length: int | None) -> dict[str, Any]:
    """One unpaired row -> prompt_ids, completion_ids (ending with EOS for plain text), label; the completion is
    cut so the pair fits max_length (the prompt keeps at most max_length - 1 tokens, its end)."""
    conversational = is_conversational(example)
    prompt_text, completion_text = render_prompt_completion(tokenizer, example["prompt"], example["completion"])
    prompt_ids, completion_ids = tokenize_pair(tokenizer, prompt_text, completion_text, conversational)
    if max_length is not None:
        prompt_ids = prompt_ids[-(max_length - 1):]
        completion_ids = completion_ids[: max_length - len(prompt_ids)]
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "label": bool(example["label"])}


def rotate_completions(batch: dict[str, list]) -> dict[str, list]:
    """KL pairs within a batch: prompt i with completion i - 1 (the first with the last), TRL's mismatched pairs."""
    return {"KL_completion_ids": [batch["completion_ids"][-1]] + batch["completion_ids"][:-1]}


class KTOCollator:
    """(B, T) right-padded prompt + completion ids with attention and completion masks, the same for the KL pairs
    (KL_ prefixed), labels (B,) and cached reference log-probs when the rows have them."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def _sequences(self, examples, completion_key: str, prefix: str) -> dict[str, torch.Tensor]:
        seqs = [list(ex["prompt_ids"]) + list(ex[completion_key]) for ex in examples]
        masks = [[0] * len(ex["prompt_ids"]) + [1] * len(ex[completion_key]) for ex in examples]
        return {f"{prefix}input_ids": pad_token_lists(seqs, self.pad_token_id),
                f"{prefix}attention_mask": pad_token_lists([[1] * len(s) for s in seqs], 0),
                f"{prefix}completion_mask": pad_token_lists(masks, 0)}

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self._sequences(examples, "completion_ids", "")
        if "KL_completion_ids" in examples[0]:
            batch.update(self._sequences(examples, "KL_completion_ids", "KL_"))
        batch["label"] = torch.tensor([bool(ex["label"]) for ex in examples])
        for key in ("ref_logps", "ref_KL_logps"):
            if key in examples[0]:
                batch[key] = torch.tensor([ex[key] for ex in examples], dtype=torch.float32)
        return batch


def _kl_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: batch[f"KL_{k}"] for k in ("input_ids", "attention_mask", "completion_mask")}


class KTOTrainer(BaseTrainer):
    """Trains a causal LM on desirable / undesirable answers. Logged with TRL's names: kl, rewards/chosen,
    rewards/rejected, rewards/margins, logps/chosen, logps/rejected, num_tokens (eval_ prefixed in evaluation)."""

    # kto_loss is a mean over the batch: the Trainer divides it for gradient accumulation.
    loss_is_scaled_for_ga = False
    _name = "KTO"
    evaluate_returns_logged_metrics = False  # evaluate() returns Trainer's dict, as TRL's KTOTrainer does

    def __init__(
        self,
        model: torch.nn.Module | str | None = None,
        ref_model: torch.nn.Module | str | None = None,
        args: KTOConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        data_collator=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
        compute_metrics=None,
        tokenizer=None,
    ):
        processing_class = tokenizer_alias(processing_class, tokenizer, "KTOTrainer")
        if args is None:
            args = KTOConfig(output_dir=f"{str(model or 'model').rstrip('/').split('/')[-1]}-KTO")
        model, processing_class = self._policy_and_tokenizer(model, args, processing_class, peft_config)
        if isinstance(ref_model, (str, os.PathLike)):
            ref_model = cast_matmul_weights(load_reference(ref_model, args), trainer_reference_dtype(args))
        if args.disable_dropout:
            disable_dropout(model, ref_model)
        # The reference: the given one; the policy with its adapter off (LoRA); the untrained policy itself, run once
        # over the data now (precompute_ref_log_probs); or a frozen copy taken before training.
        uses_adapter = peft_config is not None or is_peft_model(model)
        if ref_model is None and not uses_adapter and not args.precompute_ref_log_probs:
            ref_model = copy_in_dtype(model, trainer_reference_dtype(args))  # bf16 matmuls in a bf16 run
        if ref_model is not None:
            ref_model = freeze_reference(ref_model, args)
        model = prepare_model(model, args, peft_config)
        self.calculate_kl = args.loss_type == "kto"
        if self.calculate_kl and args.per_device_train_batch_size < 2:
            raise ValueError("per_device_train_batch_size=1: loss_type='kto' estimates its KL term from mismatched pairs "
                             "within a batch, which needs at least 2 rows")

        def prepare(dataset, batch_size):
            if dataset is None:
                return None
            dataset = unpaired_rows(dataset)
            dataset = dataset.map(tokenize_unpaired, fn_kwargs={"tokenizer": processing_class, "max_length": args.max_length},
                                  remove_columns=dataset.column_names, num_proc=args.dataset_num_proc)
            if self.calculate_kl:
                dataset = dataset.map(rotate_completions, batched=True, batch_size=batch_size)
            return dataset

        train_dataset = prepare(train_dataset, args.per_device_train_batch_size)
        if isinstance(eval_dataset, dict):
            eval_dataset = {k: prepare(v, args.per_device_eval_batch_size) for k, v in eval_dataset.items()}
        else:
            eval_dataset = prepare(eval_dataset, args.per_device_eval_batch_size)
        super().__init__(
            model=model, args=args, data_collator=data_collator or KTOCollator(processing_class.pad_token_id),
            train_dataset=train_dataset, eval_dataset=eval_dataset, processing_class=processing_class,
            callbacks=callbacks, optimizers=optimizers, compute_metrics=compute_metrics,
        )
        self._place_reference(ref_model)
        self._total_tokens = 0
        if args.precompute_ref_log_probs and self.ref_model is None and not uses_adapter:
            # The untrained policy is the reference: its pass runs now, before any training or resume.
            self.train_dataset = self._add_reference_logps(self.train_dataset, args.precompute_ref_batch_size or args.per_device_train_batch_size)
            if isinstance(self.eval_dataset, dict):
                self.eval_dataset = {k: self._add_reference_logps(v, args.precompute_ref_batch_size or args.per_device_eval_batch_size)
                                     for k, v in self.eval_dataset.items()}
            elif self.eval_dataset is not None:
                self.eval_dataset = self._add_reference_logps(self.eval_dataset, args.precompute_ref_batch_size or args.per_device_eval_batch_size)

    # ---- the reference ------------------------------------------------------------------------------------
    @torch.no_grad()
    def _reference_logps(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        # The reference copy, the policy with its adapter off, or (before training, with precompute_ref_log_probs)
        # the untrained policy itself.
        with reference_model(self.ref_model, self.model, self.accelerator) as reference, self.accelerator.autocast():
            logps = completion_logps(reference, batch, share_prompt=False).float()
            kl_logps = completion_logps(reference, _kl_batch(batch), share_prompt=False).float() if self.calculate_kl else None
        return logps, kl_logps

    def _add_reference_logps(self, dataset, batch_size: int):
        if dataset is None:
            return None

        def columns(batch):
            logps, kl_logps = self._reference_logps(batch)
            return {"ref_logps": logps, **({"ref_KL_logps": kl_logps} if kl_logps is not None else {})}

        return with_reference_columns(dataset, self.data_collator, batch_size, self.args.device, columns)

    # ---- loss ------------------------------------------------------------------------------------------
    def compute_loss(self, model, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch=None):
        mode = "train" if model.training else "eval"
        metrics = self._metrics[mode]
        labels = inputs["label"].bool()
        # 1. the policy's summed completion log-probs, and (no gradient, Sec. 4.1) those of the mismatched pairs
        with self.accelerator.autocast():
            logps = completion_logps(model, inputs, share_prompt=False).float()  # (B,)
            if self.calculate_kl:
                with torch.no_grad():
                    kl_logps = completion_logps(model, _kl_batch(inputs), share_prompt=False).float()
        # 2. the reference's: cached in the batch, or one reference pass now
        if "ref_logps" in inputs:
            ref_logps, ref_kl_logps = inputs["ref_logps"], inputs.get("ref_KL_logps")
        else:
            ref_logps, ref_kl_logps = self._reference_logps(inputs)
        # 3. the KL reference point z0 (averaged over processes) and the loss
        kl = torch.zeros((), device=logps.device)
        if self.calculate_kl:
            kl = self.accelerator.gather_for_metrics(kto_kl_estimate(kl_logps, ref_kl_logps)).mean().clamp(min=0)
        losses, rewards = kto_loss(logps, ref_logps, labels, kl, self.args.beta, self.args.desirable_weight,
                                   self.args.undesirable_weight, self.args.loss_type)
        # 4. TRL's statistics
        metrics["kl"].append(kl.item())
        chosen, rejected = labels.sum().item(), (~labels).sum().item()
        if chosen:
            metrics["rewards/chosen"].append(rewards[labels].mean().item())
            metrics["logps/chosen"].append(logps[labels].detach().mean().item())
        if rejected:
            metrics["rewards/rejected"].append(rewards[~labels].mean().item())
            metrics["logps/rejected"].append(logps[~labels].detach().mean().item())
        if chosen and rejected:
            metrics["rewards/margins"].append(rewards[labels].mean().item() - rewards[~labels].mean().item())
        if mode == "train":
            self._total_tokens += int(self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum())
        metrics["num_tokens"] = [float(self._total_tokens)]
        loss = losses.mean()
        return (loss, {"rewards": rewards}) if return_outputs else loss


__all__ = ["KTOConfig", "KTOTrainer", "KTOCollator", "tokenize_unpaired", "unpaired_rows"]
