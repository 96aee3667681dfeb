"""Supervised fine-tuning on transformers.Trainer.

    trainer = SFTTrainer("default", args=SFTConfig(output_dir="sft"), train_dataset=rows)
    trainer.train(); trainer.save_model()

Rows are prompt/completion (standard or conversational), `messages`, or `text`. By default the loss is
taken on completion tokens only (the prompt is context, not something to imitate); `messages` rows count
their last assistant turn as the completion. With packing, examples are concatenated into max_length
blocks so no compute goes to padding.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import Trainer

from rlhf.base_trainer import BaseTrainer, for_each_dataset
from rlhf.data import SFTCollator, check_sft_rows, pack_examples, tokenize_sft, tokenizer_alias
from rlhf.loading import DEFAULT_POLICY
from rlhf.trainer_config import TrainerConfig
from rlhf.trainer_setup import prepare_model


@dataclass
class SFTConfig(TrainerConfig):
    """TrainerConfig (TrainingArguments and the shared CPU settings) plus SFT's own fields;
    defaults suit a small CPU run."""

    model_name_or_path: str = field(
        default=DEFAULT_POLICY, metadata={"help": "Model when the trainer is given a name: 'default', a folder, an adapter folder."}
    )
    max_length: int | None = field(default=512, metadata={"help": "Tokens per example (or per packed block); longer ones are cut."})
    completion_only_loss: bool = field(
        default=True, metadata={"help": "Take the loss on completion tokens only (prompt tokens get label -100)."}
    )
    packing: bool = field(default=False, metadata={"help": "Concatenate examples into max_length blocks (no padding)."})
    dataset_text_field: str | None = field(
        default=None, metadata={"help": "Train on this column's plain text (TRL 0.11), loss on every token; None: "
                                        "prompt/completion, messages or text rows as they come."}
    )
    # TrainingArguments fields whose defaults we change for small CPU runs:
    output_dir: str | None = field(default="sft-model", metadata={"help": "Where checkpoints and the final model go."})
    learning_rate: float = field(default=2e-5, metadata={"help": "AdamW learning rate (LoRA adapters take ~10x more)."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Examples (or packed blocks) per step."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the training data."})
    logging_steps: float = field(default=5, metadata={"help": "Log metrics every this many steps."})
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Keep False: the collator needs the tokenised columns the model does not take."}
    )

    def __post_init__(self):
        if self.packing and self.max_length is None:
            raise ValueError("packing=True: needs max_length (the block size)")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length={self.max_length!r}: must be at least 2")
        super().__post_init__()


def text_rows(dataset, formatting_func=None, text_field: str | None = None):
    """TRL 0.11's plain-text inputs as `text` rows: formatting_func(rows) -> texts, or one text column.

    TRL calls formatting_func on a batch (a dict of lists) and expects a list of texts; a function written
    for one row (returning a str) is detected on the first row and then mapped row by row.
    """
    if formatting_func is not None:
        if isinstance(formatting_func(dataset[:1]), str):
            return dataset.map(lambda row: {"text": formatting_func(row)}, remove_columns=dataset.column_names)
        return dataset.map(lambda rows: {"text": list(formatting_func(rows))}, batched=True,
                           remove_columns=dataset.column_names)
    if text_field is None:
        return dataset
    if text_field not in dataset.column_names:
        raise ValueError(f"dataset_text_field={text_field!r}: no such column (columns: {dataset.column_names})")
    dataset = dataset.select_columns([text_field])
    return dataset if text_field == "text" else dataset.rename_column(text_field, "text")


class SFTTrainer(BaseTrainer):
    """Causal-LM fine-tuning on completions. Logs loss and mean_token_accuracy (eval_ prefixed in eval)."""

    _name = "SFT"
    # Trainer's own evaluation step (logits and labels too): a compute_metrics given to the trainer reads them.
    prediction_step = Trainer.prediction_step

    def __init__(
        self,
        model: torch.nn.Module | str | None = None,
        args: SFTConfig | None = None,
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
        formatting_func=None,
    ):
        """`tokenizer=` is TRL 0.11's name for processing_class; `formatting_func(rows) -> texts` (TRL 0.11) turns
        any rows into plain text; data_collator, compute_metrics, callbacks,
        optimizers and preprocess_logits_for_metrics pass through to transformers.Trainer (a data_collator
        receives the tokenised rows and replaces ours)."""
        processing_class = tokenizer_alias(processing_class, tokenizer, "SFTTrainer")
        args = args if args is not None else SFTConfig()
        model, processing_class = self._policy_and_tokenizer(model, args, processing_class, peft_config)
        model = prepare_model(model, args, peft_config)

        def prepare(dataset):
            if dataset is None:
                return None
            dataset = text_rows(dataset, formatting_func, args.dataset_text_field)
            check_sft_rows(dataset)
            dataset = dataset.map(
                tokenize_sft, fn_kwargs={"tokenizer": processing_class, "max_length": args.max_length},
                remove_columns=dataset.column_names,
            )
            if args.packing:
                dataset = dataset.map(pack_examples, batched=True, fn_kwargs={"max_length": args.max_length})
            return dataset

        eval_dataset = for_each_dataset(prepare, eval_dataset)
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator or SFTCollator(processing_class.pad_token_id, args.completion_only_loss),
            train_dataset=prepare(train_dataset),
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        )

    def compute_loss(self, model, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch=None):
        # The model's own shifted cross-entropy over labels != -100 (normalised by num_items_in_batch
        # across gradient accumulation); we add token accuracy on the same positions.
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        with torch.no_grad():
            predictions = outputs.logits[:, :-1].argmax(-1)  # (B, T-1)
            labels = inputs["labels"][:, 1:]
            counted = labels != -100
            correct = ((predictions == labels) & counted).sum()
            accuracy = (correct / counted.sum().clamp(min=1)).item()
        self._metrics["train" if model.training else "eval"]["mean_token_accuracy"].append(accuracy)
        return (loss, outputs) if return_outputs else loss


__all__ = ["SFTConfig", "SFTTrainer"]
