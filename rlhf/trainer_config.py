"""The fields every transformers.Trainer-based config here shares (SFT, Reward, DPO, GRPO, RLOO, KTO), in one base
dataclass so the trainers cannot drift apart: the CPU speed and memory settings, and the CPU fix-ups of
TrainingArguments that bf16 needs. Each trainer's config inherits it and adds its own fields. The settings' fields
themselves are defined once in rlhf/configs.py, where PPOConfig (not a TrainingArguments) takes them too.
`trl_only` marks a TRL field this library accepts only at TRL's default (GRPOConfig, RLOOConfig, KTOConfig use it)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch
from transformers import TrainingArguments

from rlhf.configs import (
    attn_implementation_field,
    attention_from_init_kwargs,
    check_attn_implementation,
    check_learning_rate,
    keep_freed_memory_field,
    share_input_casts_field,
)
from rlhf.precision import (
    check_dtype,
    dtype_field,
    load_in_4bit_field,
    model_init_kwargs_field,
    trainer_precision_flags,
)


def trl_only(default: Any, why: str):
    """A TRL 1.16 config field this library does not implement: accepted at TRL's default, refused otherwise
    (refuse_trl_only_values, from the config's __post_init__), so a TRL script that leaves it alone runs and one
    that sets it learns why not."""
    return field(default=default, metadata={"help": f"TRL 1.16 field, not supported here: {why}. Only its default "
                                                    f"({default!r}) is accepted.", "trl_only": why})


def refuse_trl_only_values(config) -> None:
    """ValueError naming the first trl_only field of `config` set to anything but its default."""
    for spec in fields(config):
        why = spec.metadata.get("trl_only")
        if why and getattr(config, spec.name) != spec.default:
            raise ValueError(f"{spec.name}={getattr(config, spec.name)!r}: not supported here ({why})")


@dataclass
class TrainerConfig(TrainingArguments):
    """TrainingArguments plus the settings every trainer here applies to its model (rlhf/trainer_setup.py)."""

    keep_freed_memory: bool = keep_freed_memory_field()
    attn_implementation: str = attn_implementation_field("auto")
    share_input_casts: bool = share_input_casts_field()
    dtype: Literal["float32", "bfloat16", "float16", "auto"] | None = dtype_field()
    model_init_kwargs: dict | None = model_init_kwargs_field()
    load_in_4bit: bool = load_in_4bit_field()

    def __post_init__(self):
        self.attn_implementation = attention_from_init_kwargs(self.attn_implementation, "auto", self.model_init_kwargs)
        check_attn_implementation(self.attn_implementation)
        check_dtype(self.dtype)
        if torch.cuda.is_available() and not self.use_cpu:
            # bf16=True on a GPU without bf16 (T4, V100): fp16 autocast with accelerate's gradient scaler instead.
            self.bf16, self.fp16 = trainer_precision_flags(bool(self.bf16), bool(self.fp16), "cuda")
        check_learning_rate(self.learning_rate)
        if not torch.cuda.is_available():
            # bf16 on CPU is torch.autocast("cpu"), which TrainingArguments allows only with use_cpu.
            self.use_cpu = self.use_cpu or bool(self.bf16)
            self.dataloader_pin_memory = False
        super().__post_init__()


__all__ = ["TrainerConfig", "refuse_trl_only_values", "trl_only"]
