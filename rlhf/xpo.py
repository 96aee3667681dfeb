"""Exploratory Preference Optimization (Xie et al. 2024, "Exploratory Preference Optimization: Harnessing Implicit
Q*-Approximation for Sample-Efficient RLHF") with TRL's XPOTrainer API.

    trainer = XPOTrainer("default", judge=prefers_short, args=XPOConfig(output_dir="xpo", alpha=1e-5), train_dataset=rows)

XPO is online DPO (rlhf/online_dpo.py) with two differences, which are all this module holds:
1. the pair a judge compares is the policy's answer and the reference model's own answer (not two policy answers);
2. the loss adds alpha * log pi(y_ref), the policy's summed log-prob of the reference's answer (rlhf/online_losses.py
   xpo_exploration): minimising it moves probability away from what the reference would say, towards exploring.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlhf.online_dpo import OnlineDPOConfig, OnlineDPOTrainer, check_schedule
from rlhf.online_losses import value_for_epoch, xpo_exploration


@dataclass
class XPOConfig(OnlineDPOConfig):
    """TRL's XPOConfig: OnlineDPOConfig plus the exploration weight alpha."""

    alpha: float | list[float] = field(default=1e-5, metadata={
        "help": "Weight of XPO's exploration term (alpha * log-prob of the reference's answer); a list gives one per "
                "epoch, the last for the rest."})
    output_dir: str | None = field(default="xpo-model", metadata={"help": "Where checkpoints and the final model go."})

    def __post_init__(self):
        if self.num_generations != 2:
            raise ValueError(f"num_generations={self.num_generations!r}: XPO compares the policy's answer "
                             "with one from elsewhere: exactly 2")
        self.alpha = check_schedule("alpha", self.alpha, positive=False)
        super().__post_init__()


class XPOTrainer(OnlineDPOTrainer):
    """XPO with TRL's constructor and config; logs online DPO's names plus loss/dpo, loss/xpo and alpha."""

    config_class = XPOConfig
    _name = "XPO"

    @property
    def alpha(self) -> float:
        return value_for_epoch(self.args.alpha, self.state.epoch or 0)

    def _generate_pair(self, prompt_ids: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        # 1. the policy's answer first, the reference's second
        return self._sample(prompt_ids), self._sample(prompt_ids, reference=True)

    def extra_loss(self, inputs: dict, token_logps: torch.Tensor) -> torch.Tensor:
        # 2. the exploration term on the reference's answers (rows B..2B), over every pair, ties too (as TRL)
        batch_size = len(inputs["verdicts"])
        alpha = self.alpha
        term = xpo_exploration(token_logps[batch_size:].sum(-1), alpha).mean()
        metrics = self._metrics[self._mode()]
        metrics["loss/xpo"].append(term.item())
        metrics["alpha"].append(alpha)
        return term


__all__ = ["XPOConfig", "XPOTrainer"]
