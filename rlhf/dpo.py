"""Direct Preference Optimization (Rafailov et al. 2023) on transformers.Trainer.

    trainer = DPOTrainer("default", args=DPOConfig(output_dir="dpo", bf16=True), train_dataset=prefs)
    trainer.train(); trainer.save_model()

The reference is, in order: `ref_model` if given; the policy with its adapter disabled when training a
LoRA adapter (no second copy in memory); with precompute_ref_log_probs the untrained policy itself, run over
the given datasets when the trainer is built (no copy kept); otherwise a frozen copy taken before training.
With precompute_ref_log_probs (default) the reference runs once over the data before training and its
log-probs ride along in the dataset, so each step is a single policy forward pass.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

import torch

from rlhf.base_trainer import BaseTrainer, for_each_dataset
from rlhf.data import PreferenceCollator, check_preference_rows, tokenize_preference_causal, tokenizer_alias
from rlhf.loading import DEFAULT_POLICY
from rlhf.dpo_losses import (
    DPO_LOSS_TYPES,
    F_DIVERGENCE_LOSSES,
    F_DIVERGENCES,
    LABEL_SMOOTHING_LOSSES,
    ld_token_weights,
    loss_type_list,
)
from rlhf.logps import completion_logps
from rlhf.losses import dpo_loss
from rlhf.peft_utils import is_peft_model
from rlhf.precision import cast_matmul_weights, trainer_reference_dtype
from rlhf.reference_logps import reference_model, with_reference_columns
from rlhf.trainer_config import TrainerConfig
from rlhf.trainer_setup import load_reference, prepare_model

LOSS_TYPES = DPO_LOSS_TYPES  # TRL 1.16's, one pure function each in rlhf/dpo_losses.py


@dataclass
class DPOConfig(TrainerConfig):
    """TrainerConfig (TrainingArguments and the shared CPU settings) plus DPO's own fields;
    defaults suit a small CPU run."""

    model_name_or_path: str = field(
        default=DEFAULT_POLICY, metadata={"help": "Policy when the trainer is given a name: 'default', a folder, an adapter folder."}
    )
    beta: float = field(default=0.1, metadata={"help": "KL strength: higher keeps the policy closer to the reference."})
    # A list of names is accepted too (TRL 1.x's `loss_type=["sigmoid", "sft"]`); the Literal keeps the form's choice.
    loss_type: Literal["sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
                       "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm"] = field(
        default="sigmoid", metadata={"help": "TRL 1.16's DPO losses (rlhf/dpo_losses.py names each one's paper): sigmoid "
                                             "(DPO), ipo, hinge, robust, bco_pair, sppo_hard, nca_pair, apo_zero, "
                                             "apo_down, exo_pair, discopop, aot, aot_unpaired, sft, sigmoid_norm; or a "
                                             "list of them, weighted by loss_weights."}
    )
    loss_weights: list[float] | None = field(
        default=None, metadata={"help": "One weight per loss_type entry when it is a list (e.g. [0.8, 0.2]); None: 1 each."}
    )
    label_smoothing: float = field(
        default=0.0, metadata={"help": "Assumed rate of flipped labels in [0, 0.5): conservative DPO for sigmoid, "
                                       "rDPO for robust, EXO's epsilon for exo_pair (needs > 0, e.g. 1e-3), aot; 0: off."}
    )
    discopop_tau: float = field(default=0.05, metadata={"help": "DiscoPOP's temperature tau (loss_type='discopop'; the paper's 0.05)."})
    f_divergence_type: Literal["reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"] = field(
        default="reverse_kl", metadata={"help": "f-DPO's divergence to the reference (reverse_kl: standard DPO); others "
                                                "only with the sigmoid, sigmoid_norm, hinge, ipo, exo_pair, robust, discopop, sft losses."})
    f_alpha_divergence_coef: float = field(default=0.5, metadata={"help": "alpha of f_divergence_type='alpha_divergence'."})
    use_weighting: bool = field(default=False, metadata={
        "help": "TRL 1.16's WPO weighting of pairs by the policy's own probability of them: not implemented here, so "
                "True is refused (the field exists so a TRL script gets that one-line error, not a TypeError)."})
    ld_alpha: float | None = field(default=None, metadata={
        "help": "LD-DPO (TRL's ld_alpha, in [0, 1]): weight of the longer completion's tokens beyond the shorter one's "
                "length in the summed log-probs; None: plain sums (share_prompt_forward is not used with it)."})
    max_length: int | None = field(default=512, metadata={"help": "Tokens per prompt + completion; completions are cut at the end."})
    max_prompt_length: int | None = field(default=256, metadata={"help": "Prompt tokens kept (the last ones)."})
    precompute_ref_log_probs: bool = field(
        default=True, metadata={"help": "Run the reference once before training and cache its log-probs (faster steps)."}
    )
    share_prompt_forward: bool = field(
        default=True, metadata={"help": "Run each pair's prompt once, with chosen and rejected after it in one sequence (same numbers, fewer tokens; Llama/Mistral/Qwen models)."}
    )
    # TrainingArguments fields whose defaults we change for small CPU runs:
    output_dir: str | None = field(default="dpo-model", metadata={"help": "Where checkpoints and the final model go."})
    learning_rate: float = field(default=5e-6, metadata={"help": "AdamW learning rate (LoRA adapters take ~10x more)."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Preference pairs per step (2x sequences)."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the training pairs."})
    logging_steps: float = field(default=5, metadata={"help": "Log metrics every this many steps."})
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Keep False: the collator needs the tokenised columns the model does not take."}
    )

    def __post_init__(self):
        losses = loss_type_list(self.loss_type)  # raises on an unknown name
        if self.loss_weights is not None and len(self.loss_weights) != len(losses):
            raise ValueError(f"loss_weights={self.loss_weights!r}: needs one weight per loss_type entry ({len(losses)})")
        if "exo_pair" in losses and not self.label_smoothing > 0:
            raise ValueError(f"label_smoothing={self.label_smoothing!r}: loss_type 'exo_pair' needs it > 0 (the EXO paper uses 1e-3)")
        if self.discopop_tau <= 0:
            raise ValueError(f"discopop_tau={self.discopop_tau!r}: must be positive")
        if self.use_weighting:
            raise ValueError("use_weighting=True: TRL's WPO pair weighting is not implemented in rlhf's DPOTrainer; "
                             "leave it False (the default)")
        if self.ld_alpha is not None and not 0 <= self.ld_alpha <= 1:
            raise ValueError(f"ld_alpha={self.ld_alpha!r}: must be in [0, 1] (or None)")
        if self.f_divergence_type not in F_DIVERGENCES:
            raise ValueError(f"f_divergence_type={self.f_divergence_type!r}: must be one of {', '.join(F_DIVERGENCES)}")
        if self.f_divergence_type != "reverse_kl" and not set(losses) <= set(F_DIVERGENCE_LOSSES):
            raise ValueError(f"f_divergence_type={self.f_divergence_type!r}: only the {', '.join(F_DIVERGENCE_LOSSES)} "
                             f"losses take another f-divergence (loss_type {losses})")
        if self.beta <= 0:
            raise ValueError(f"beta={self.beta!r}: must be positive")
        if not 0 <= self.label_smoothing < 0.5:
            raise ValueError(f"label_smoothing={self.label_smoothing!r}: must be in [0, 0.5)")
        if self.label_smoothing and not set(losses) & set(LABEL_SMOOTHING_LOSSES):
            raise ValueError(f"label_smoothing={self.label_smoothing!r}: only the {', '.join(LABEL_SMOOTHING_LOSSES)} losses use it")
        super().__post_init__()


class DPOTrainer(BaseTrainer):
    """Trains a causal LM on preference pairs with any of TRL 1.16's DPO losses (or a weighted list of them).

    Logged with TRL's names: rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins,
    logps/chosen, logps/rejected (eval_ prefixed during evaluation).
    """

    # dpo_loss is a mean over the batch's pairs, so the Trainer must divide it for gradient accumulation.
    loss_is_scaled_for_ga = False
    _name = "DPO"

    def __init__(
        self,
        model: torch.nn.Module | str | None = None,
        ref_model: torch.nn.Module | str | None = None,
        args: DPOConfig | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        peft_config=None,
        callbacks=None,
        optimizers=(None, None),
        tokenizer=None,
        data_collator=None,
        preprocess_logits_for_metrics=None,
        compute_metrics=None,
    ):
        """`tokenizer=` is TRL 0.11's name for processing_class; data_collator, compute_metrics, callbacks,
        optimizers and preprocess_logits_for_metrics pass through to transformers.Trainer (a data_collator
        receives the tokenised rows and replaces ours)."""
        processing_class = tokenizer_alias(processing_class, tokenizer, "DPOTrainer")
        args = args if args is not None else DPOConfig()
        model, processing_class = self._policy_and_tokenizer(model, args, processing_class, peft_config)
        if isinstance(ref_model, (str, os.PathLike)):  # loaded before prepare_model, in the run's reference dtype
            ref_model = cast_matmul_weights(load_reference(ref_model, args), trainer_reference_dtype(args))
        model = prepare_model(model, args, peft_config)
        # With precomputed reference log-probs and no reference given, the untrained policy is the reference:
        # its pass runs at the end of __init__ (before any training or resume) and no copy is kept, which
        # saves a model's fp32 weights of peak memory (as TRL does). Sharded set-ups keep the copy.
        self._policy_is_reference = (
            ref_model is None and not is_peft_model(model) and args.precompute_ref_log_probs and not args.deepspeed and not args.fsdp
        )
        copies_policy = not is_peft_model(model) and not self._policy_is_reference
        ref_model = self._reference_model(ref_model, args, copy_of=model if copies_policy else None)

        def tokenize(dataset):
            if dataset is None:
                return None
            check_preference_rows(dataset)
            return dataset.map(
                tokenize_preference_causal,
                fn_kwargs={"tokenizer": processing_class, "max_length": args.max_length, "max_prompt_length": args.max_prompt_length},
                remove_columns=dataset.column_names,
            )

        eval_dataset = for_each_dataset(tokenize, eval_dataset)
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator or PreferenceCollator(processing_class.pad_token_id),
            train_dataset=tokenize(train_dataset),
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        )
        self._place_reference(ref_model)
        if self._policy_is_reference:
            self.train_dataset = self.add_reference_logps(self.train_dataset)
            self.eval_dataset = for_each_dataset(self.add_reference_logps, self.eval_dataset)
            self._reference_done = True

    # ---- reference log-probs, cached in the dataset ----------------------------------------------------
    def reference_logps(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(ref_chosen_logps, ref_rejected_logps), each (B,), from the reference model."""
        if self._policy_is_reference and getattr(self, "_reference_done", False):
            raise ValueError(
                "DPOTrainer: no reference model is kept (precompute_ref_log_probs with no ref_model): its log-probs were "
                "computed for the datasets given to the trainer. Pass ref_model=, or give the dataset to the trainer."
            )
        # The reference copy, the policy without its adapter, or the untrained policy itself (see __init__).
        with torch.no_grad(), reference_model(self.ref_model, self.model, self.accelerator) as reference, \
                self.accelerator.autocast():
            logps = completion_logps(reference, batch, self.args.share_prompt_forward, self._token_weights(batch))
        return logps.float().chunk(2)

    def add_reference_logps(self, dataset):
        """The dataset with ref_chosen_logps and ref_rejected_logps columns (one pass of the reference)."""
        if dataset is None or "ref_chosen_logps" in dataset.column_names:
            return dataset

        def columns(batch):
            ref_chosen, ref_rejected = self.reference_logps(batch)
            return {"ref_chosen_logps": ref_chosen, "ref_rejected_logps": ref_rejected}

        return with_reference_columns(dataset, self.data_collator, self.args.per_device_eval_batch_size,
                                      self.args.device, columns)

    def get_train_dataloader(self):
        if self.args.precompute_ref_log_probs:
            self.train_dataset = self.add_reference_logps(self.train_dataset)
        return super().get_train_dataloader()

    def get_eval_dataloader(self, eval_dataset=None):
        if self.args.precompute_ref_log_probs:
            if eval_dataset is None or isinstance(eval_dataset, str):
                if isinstance(self.eval_dataset, dict):
                    self.eval_dataset = {k: self.add_reference_logps(v) for k, v in self.eval_dataset.items()}
                else:
                    self.eval_dataset = self.add_reference_logps(self.eval_dataset)
            else:
                eval_dataset = self.add_reference_logps(eval_dataset)
        return super().get_eval_dataloader(eval_dataset)

    # ---- loss ------------------------------------------------------------------------------------------
    def _token_weights(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """LD-DPO's per-token weights when ld_alpha is set (rlhf.dpo_losses.ld_token_weights), else None."""
        return None if self.args.ld_alpha is None else ld_token_weights(batch["completion_mask"], self.args.ld_alpha)

    def compute_loss(self, model, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch=None):
        # 1. policy log-probs of [chosen; rejected] in one forward pass (under autocast here too: the shared-prompt
        # path calls the decoder and LM head directly, not the forward that accelerate wraps in autocast)
        with self.accelerator.autocast():
            policy_chosen, policy_rejected = completion_logps(
                model, inputs, self.args.share_prompt_forward, self._token_weights(inputs)).float().chunk(2)  # (B,), (B,)
        # 2. reference log-probs: cached in the batch, or one reference forward pass now
        if "ref_chosen_logps" in inputs:
            ref_chosen, ref_rejected = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:
            ref_chosen, ref_rejected = self.reference_logps(inputs)
        # 3. the preference loss and the implicit rewards beta * log(pi / ref)
        chosen_lengths, rejected_lengths = inputs["completion_mask"].sum(dim=-1).chunk(2)  # (B,), (B,)
        losses, chosen_rewards, rejected_rewards = dpo_loss(
            policy_chosen, policy_rejected, ref_chosen, ref_rejected,
            beta=self.args.beta, loss_type=self.args.loss_type, label_smoothing=self.args.label_smoothing,
            loss_weights=self.args.loss_weights, discopop_tau=self.args.discopop_tau,
            # completion tokens per row, for the length-normalised losses (ipo, sigmoid_norm, sft)
            chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths,
            f_divergence_type=self.args.f_divergence_type, f_alpha_divergence_coef=self.args.f_alpha_divergence_coef,
        )
        loss = losses.mean()
        # 4. metrics, averaged over the steps between two logs
        metrics = self._metrics["train" if model.training else "eval"]
        metrics["rewards/chosen"].append(chosen_rewards.mean().item())
        metrics["rewards/rejected"].append(rejected_rewards.mean().item())
        metrics["rewards/accuracies"].append((chosen_rewards > rejected_rewards).float().mean().item())
        metrics["rewards/margins"].append((chosen_rewards - rejected_rewards).mean().item())
        metrics["logps/chosen"].append(policy_chosen.detach().mean().item())
        metrics["logps/rejected"].append(policy_rejected.detach().mean().item())
        return (loss, {"chosen_rewards": chosen_rewards, "rejected_rewards": rejected_rewards}) if return_outputs else loss


__all__ = ["DPOConfig", "DPOTrainer", "completion_logps"]
