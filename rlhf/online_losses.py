"""The math of the online preference trainers (online DPO, XPO, Nash-MD), as pure functions of tensors and floats.

Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback") samples two answers per
prompt, lets a judge pick the better one, and takes DPO's loss on that fresh pair; the losses themselves are
rlhf/dpo_losses.py's sigmoid and IPO, used on summed completion log-probs without length normalisation (as TRL's
OnlineDPOTrainer does). What is online-specific is here: turning verdicts into chosen/rejected rows (ties left out),
the missing-EOS penalty, the per-epoch schedules of beta/alpha/mixture_coef, XPO's exploration term and Nash-MD's
geometric mixture and REINFORCE loss.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from rlhf.dpo_losses import PairLogps, ipo_loss, sigmoid_loss

ONLINE_DPO_LOSS_TYPES = ("sigmoid", "ipo")


def value_for_epoch(value: float | Sequence[float], epoch: float) -> float:
    """TRL's per-epoch schedule (beta, XPO's alpha, Nash-MD's mixture_coef): a float is used throughout; a list gives
    one value per epoch (epoch 0 the first) and its last value for every later epoch."""
    if isinstance(value, (int, float)):
        return float(value)
    values = list(value)
    return float(values[min(int(epoch), len(values) - 1)])


def missing_eos_penalty(scores: torch.Tensor, has_eos: torch.Tensor, penalty: float | None) -> torch.Tensor:
    """Scores minus `penalty` where the answer never ended (no EOS within max_new_tokens); None: unchanged."""
    if not penalty:
        return scores
    return scores - penalty * (~has_eos.bool()).to(scores.dtype)


def chosen_rejected_rows(verdicts: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of a `[first; second]` batch (2B rows: the first answers to B prompts, then the second answers) as
    (chosen, rejected, weight), each (B,): verdict 0 takes row i as chosen and i + B as rejected, verdict 1 the
    reverse; a tie (-1) keeps the order of 0 with weight 0, so it adds nothing to the loss."""
    rows = torch.arange(batch_size, device=verdicts.device)
    second_wins = (verdicts == 1).long()
    chosen = rows + second_wins * batch_size
    rejected = rows + (1 - second_wins) * batch_size
    return chosen, rejected, (verdicts != -1).float()


def weighted_mean(losses: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """sum(w * loss) / sum(w), or 0 (still attached to the graph) when every weight is 0."""
    return (losses * weight).sum() / weight.sum().clamp(min=1.0)


def online_dpo_losses(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
                      ref_rejected: torch.Tensor, beta: float, loss_type: str = "sigmoid",
                      confidence: torch.Tensor | None = None) -> torch.Tensor:
    """Per-pair loss (B,) from summed completion log-probs: sigmoid -log sigmoid(beta * h) (Eq. 7, DPO paper) or ipo
    (h - 1 / (2 beta))^2 (Eq. 17, IPO paper), with h = (log pi(y_c) - log pi(y_r)) - (log ref(y_c) - log ref(y_r)).

    `confidence` (B,): the judge's probability p that each chosen answer is the better one (None: sure, p = 1). A
    pair is then trained towards that preference and no further: sigmoid becomes conservative DPO with eps = 1 - p
    per pair (Mitchell 2023), whose minimum is at sigmoid(beta * h) = p; ipo's target 1 / (2 beta) becomes
    (2p - 1) / (2 beta) (IPO's general target (p - 1/2) / tau, Azar et al. 2023, Eq. 12). A pair at p = 1/2 pulls
    the policy back towards the reference only, as a reward of 0 leaves PPO's KL penalty in charge."""
    pairs = PairLogps(policy_chosen, policy_rejected, ref_chosen, ref_rejected)  # no lengths: IPO on sums, as TRL's online DPO
    if loss_type == "sigmoid":
        return sigmoid_loss(pairs, beta, 0.0 if confidence is None else 1 - confidence)
    if loss_type == "ipo":
        if confidence is None:
            return ipo_loss(pairs, beta)
        return (pairs.margin - (2 * confidence - 1) / (2 * beta)) ** 2
    raise ValueError(f"loss_type={loss_type!r}: must be one of {', '.join(ONLINE_DPO_LOSS_TYPES)}")


def xpo_exploration(policy_logps_of_reference_answer: torch.Tensor, alpha: float) -> torch.Tensor:
    """XPO's exploration term per pair (Xie et al. 2024, Eq. 6; TRL's XPOTrainer): alpha * log pi(y_ref), the policy's
    summed log-prob of the reference model's own answer. Added to the DPO loss and minimised, it lowers the policy's
    likelihood of what the reference would say, pushing it to explore."""
    return alpha * policy_logps_of_reference_answer


def geometric_mixture_logits(policy_logits: torch.Tensor, ref_logits: torch.Tensor, mixture_coef: float) -> torch.Tensor:
    """Log-probs of Nash-MD's opponent (Munos et al. 2023, Eq. 9; TRL's GeometricMixtureWrapper):
    pi_mix proportional to ref^c * pi^(1 - c), i.e. log_softmax(c * ref_logits + (1 - c) * policy_logits)."""
    return torch.log_softmax(mixture_coef * ref_logits.float() + (1 - mixture_coef) * policy_logits.float(), dim=-1)


def win_probability_from_verdicts(verdicts: torch.Tensor) -> torch.Tensor:
    """P(the policy's answer beats the opponent's) from pairwise verdicts with the policy's answer first: 1 for
    verdict 0, 0 for verdict 1, 0.5 for a tie."""
    return torch.where(verdicts == 0, 1.0, torch.where(verdicts == 1, 0.0, 0.5))


def win_probability_from_scores(policy_scores: torch.Tensor, opponent_scores: torch.Tensor) -> torch.Tensor:
    """Bradley-Terry probability that the policy's answer wins: sigmoid(score_policy - score_opponent) (TRL's
    Nash-MD with a reward model)."""
    return torch.sigmoid(policy_scores - opponent_scores)


def nash_md_losses(policy_token_logps: torch.Tensor, ref_token_logps: torch.Tensor, mask: torch.Tensor,
                   win_probability: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Nash-MD's per-answer loss (B,) on the policy's own answers (Munos et al. 2023; TRL's NashMDTrainer):
    beta * KL - score, where score = (P(win) - 0.5) * log pi(y) (REINFORCE with 0.5 as the control variate) and the
    KL's gradient is taken by REINFORCE too: sum_t sg(log pi - log ref)_t * log pi_t. Returns (loss, score, kl) with
    kl the detached sum of log-ratios, for logging. Tensors (B, T) with `mask` 1 on answer tokens."""
    mask = mask.to(policy_token_logps.dtype)
    logps = (policy_token_logps * mask).sum(-1)  # (B,)
    score = (win_probability - 0.5) * logps
    log_ratio = ((policy_token_logps - ref_token_logps) * mask).detach()  # (B, T)
    kl_loss = (log_ratio * policy_token_logps).sum(-1)
    return beta * kl_loss - score, score.detach(), log_ratio.sum(-1)


__all__ = ["ONLINE_DPO_LOSS_TYPES", "chosen_rejected_rows", "geometric_mixture_logits", "missing_eos_penalty",
           "nash_md_losses", "online_dpo_losses", "value_for_epoch", "weighted_mean", "win_probability_from_scores",
           "win_probability_from_verdicts", "xpo_exploration"]
