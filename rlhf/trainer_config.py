"""The fields every transformers.Trainer-based config here shares (SFT, Reward, DPO, GRPO, RLOO, KTO), in one base
dataclass so the trainers cannot drift apart: the CPU speed and memory settings, and the CPU fix-ups of
TrainingArguments that bf16 needs. Each trainer's config inherits it and adds its own fields. The settings' fields
themselves are defined once in rlhf/configs.py, where PPOConfig (not a TrainingArguments) takes them too."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import TrainingArguments

from rlhf.configs import (
    attn_implementation_field,
    check_attn_implementation,
    check_learning_rate,
    keep_freed_memory_field,
    share_input_casts_field,
)


@dataclass
class TrainerConfig(TrainingArguments):
    """TrainingArguments plus the settings every trainer here applies to its model (rlhf/trainer_setup.py)."""

    keep_freed_memory: bool = keep_freed_memory_field()
    attn_implementation: str = attn_implementation_field("auto")
    share_input_casts: bool = share_input_casts_field()

    def __post_init__(self):
        check_attn_implementation(self.attn_implementation)
        check_learning_rate(self.learning_rate)
        if not torch.cuda.is_available():
            # bf16 on CPU is torch.autocast("cpu"), which TrainingArguments allows only with use_cpu.
            self.use_cpu = self.use_cpu or bool(self.bf16)
            self.dataloader_pin_memory = False
        super().__post_init__()


__all__ = ["TrainerConfig"]
