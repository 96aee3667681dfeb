"""REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics") with TRL 1.16's RLOOTrainer API.

    trainer = RLOOTrainer("default", reward_funcs=reward_len, args=RLOOConfig(output_dir="rloo"), train_dataset=rows)
    trainer.train()

TRL 1.x's RLOO is GRPO's loop (rlhf/grpo.py: sampling groups of answers per prompt, reward functions, buffering
and reuse of a generation batch) with three differences, which are all this module holds:
1. the KL to the reference is a penalty on the reward, beta * sum over the answer of log pi - log ref (k1, as in
   the RLOO paper), not a loss term;
2. the advantage is the reward minus the mean reward of the other answers to the same prompt (no std scaling;
   `normalize_advantages` whitens them over the batch);
3. the probability ratio is one per answer (summed token log-probs), clipped, and the loss is the mean over answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlhf.grpo import GRPOTrainer, OnlineRLConfig
from rlhf.losses import clipped_surrogate, leave_one_out_advantages, nan_std


@dataclass
class RLOOConfig(OnlineRLConfig):
    """TRL 1.16's RLOOConfig: the online fields GRPO has too (with RLOO's defaults) plus its own."""

    num_generations: int = field(default=2, metadata={"help": "Answers sampled per prompt (TRL's RLOO default 2)."})
    beta: float = field(default=0.05, metadata={"help": "KL penalty coefficient on the reward (0: no reference model)."})
    normalize_advantages: bool = field(default=False, metadata={
        "help": "Whiten the advantages over the generation batch (mean 0, std 1)."})
    reward_clip_range: tuple[float, float] | None = field(default=None, metadata={
        "help": "Clip the summed rewards to (min, max) before the KL penalty (None: no clipping)."})

    def __post_init__(self):
        if self.reward_clip_range is not None:
            low, high = self.reward_clip_range
            if low > high:
                raise ValueError(f"reward_clip_range={self.reward_clip_range!r}: min must not exceed max")
        super().__post_init__()

    @property
    def needs_old_logps(self) -> bool:
        # The KL penalty needs the sampling policy's log-probs whenever there is a reference.
        return self.beta != 0.0 or super().needs_old_logps


class RLOOTrainer(GRPOTrainer):
    """RLOO with TRL 1.16's constructor, config and logged names (reward, reward_std, kl, entropy, clip_ratio/...)."""

    # The loss is a mean over the micro-batch's answers: the Trainer divides it for gradient accumulation.
    loss_is_scaled_for_ga = False
    config_class = RLOOConfig
    _name = "RLOO"

    def compute_advantages(self, rewards: torch.Tensor, batch: dict, num_generations: int) -> torch.Tensor:
        metrics = self._metrics[self._mode()]
        if self.args.reward_clip_range is not None:
            rewards = rewards.clamp(*self.args.reward_clip_range)
        if self.args.beta != 0.0:
            mask = batch["completion_mask"].float()
            per_token_kl = batch["old_per_token_logps"] - batch["ref_per_token_logps"]  # k1 (RLOO paper)
            rewards = rewards - self.args.beta * self.accelerator.gather((per_token_kl * mask).sum(-1))
            metrics["kl"].append(self._global_masked_mean(per_token_kl, mask))
        std = nan_std(rewards.view(-1, num_generations), dim=1)
        metrics["frac_reward_zero_std"].append(torch.isclose(std, torch.zeros_like(std)).float().mean().item())
        advantages = leave_one_out_advantages(rewards, num_generations)
        if self.args.normalize_advantages:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-4)
        return advantages

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs:
            raise ValueError("The RLOOTrainer does not support returning outputs")
        metrics = self._metrics[self._mode()]
        mask = inputs["completion_mask"].float()
        token_logps, entropy = self._token_logps(model, inputs, with_entropy=True)  # (B, C)
        logps = (token_logps * mask).sum(-1)  # (B,)
        old = inputs.get("old_per_token_logps")
        old_logps = logps.detach() if old is None else (old * mask).sum(-1)
        losses, clipped = clipped_surrogate(logps - old_logps, inputs["advantages"], self.args.epsilon,
                                            self.args.epsilon_upper)
        metrics["entropy"].append(self._global_masked_mean(entropy, mask))
        for name in ("low", "high", "region"):
            metrics[f"clip_ratio/{name}_mean"].append(self.accelerator.gather(clipped[name].float()).mean().item())
        metrics["clip_ratio/low_min"].append(self.accelerator.gather(clipped["low"].float()).min().item())
        metrics["clip_ratio/high_max"].append(self.accelerator.gather(clipped["high"].float()).max().item())
        return losses.mean()


__all__ = ["RLOOConfig", "RLOOTrainer"]
