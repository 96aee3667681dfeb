"""The fields every transformers.Trainer-based config here shares (SFT, Reward, DPO, GRPO, RLOO, KTO), in one base
dataclass so the trainers cannot drift apart: the CPU speed and memory settings, and the CPU fix-ups of
TrainingArguments that bf16 needs. Each trainer's config inherits it and adds its own fields."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import TrainingArguments

from rlhf.configs import ATTENTION_CHOICES


@dataclass
class TrainerConfig(TrainingArguments):
    """TrainingArguments plus the settings every trainer here applies to its model (rlhf/trainer_setup.py)."""

    keep_freed_memory: bool = field(
        default=True, metadata={"help": "On CPU, keep freed memory in the process (no page faults per step; see rlhf/cpu_memory.py)."}
    )
    attn_implementation: str = field(
        default="auto", metadata={"help": "Attention kernel while training: auto (lean_eager on CPU, see rlhf/attention.py), lean_eager, eager, sdpa, model (keep)."}
    )
    share_input_casts: bool = field(
        default=True, metadata={"help": "Under bf16 autocast, cast each attention/MLP block's input once for all its projections (one bf16 copy kept, not 2-3; see rlhf/autocast_inputs.py)."}
    )

    def __post_init__(self):
        if self.attn_implementation not in ATTENTION_CHOICES:
            raise ValueError(f"attn_implementation={self.attn_implementation!r}: must be one of {', '.join(ATTENTION_CHOICES)}")
        if not torch.cuda.is_available():
            # bf16 on CPU is torch.autocast("cpu"), which TrainingArguments allows only with use_cpu.
            self.use_cpu = self.use_cpu or bool(self.bf16)
            self.dataloader_pin_memory = False
        super().__post_init__()


__all__ = ["TrainerConfig"]
