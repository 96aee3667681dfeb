"""Pure loss functions of tensors and floats. Each is tested against hand-computed values."""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from rlhf.core import clip_by_value, full_kl_from_logits, masked_mean
from rlhf.dpo_losses import PairLogps, dpo_losses

# ---- PPO: KL penalty, per-token rewards, GAE, policy and value losses ----------------------------
# All per-token tensors are (B, R): R response positions, right padded, mask 1 for tokens that count
# (see rlhf.core.response_mask_after_eos).

KLPenalty = Literal["kl", "abs", "mse", "full"]


def kl_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    kind: KLPenalty = "kl",
    logits: torch.Tensor | None = None,
    ref_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate at the sampled tokens, (B, R).

    "kl": log p - log q (k1, unbiased but noisy); "abs": |log p - log q|; "mse": 0.5 (log p - log q)^2 (k2);
    "full": the exact KL over the vocabulary, which needs both models' logits (B, R, V); computed a chunk of
    positions at a time (full_kl_from_logits), so no fp32 (B, R, V) tensor is made beside the logits.
    Only "kl" is unbiased for samples from p; all need the tokens sampled from the untempered policy.
    """
    if kind == "kl":
        return logprobs - ref_logprobs
    if kind == "abs":
        return (logprobs - ref_logprobs).abs()
    if kind == "mse":
        return 0.5 * (logprobs - ref_logprobs).square()
    if kind == "full":
        if logits is None or ref_logits is None:
            raise ValueError("kl_penalty(kind='full') needs logits and ref_logits (B, R, V)")
        return full_kl_from_logits(logits, ref_logits)
    raise ValueError(f"kl_penalty: kind={kind!r} is not one of 'kl', 'abs', 'mse', 'full'")


def process_scores(
    scores: torch.Tensor, mean: float = 0.0, std: float | None = None, norm: bool = False, clip: float | None = None
) -> torch.Tensor:
    """TRL's use_score_scaling / use_score_norm / score_clip on a batch of scores (B,).

    `mean`, `std`: the running moments of all scores seen, this batch included (RunningMoments); `std=None`
    leaves the scores unscaled. Scaling divides by std (+ eps), `norm` also subtracts the mean first; `clip`
    then bounds every score to [-clip, clip].
    """
    if std is not None:
        factor = std + torch.finfo(scores.dtype).eps
        scores = (scores - mean) / factor if norm else scores / factor
    if clip is not None:
        scores = scores.clamp(-clip, clip)
    return scores


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last 1 in each row of a (B, R) mask (0 for an all-zero row)."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return (positions * (mask > 0)).amax(dim=1)


def per_token_rewards(
    scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """rewards (B, R) = -kl_coef * KL at every response token, plus the score at the last real token.

    Returns (rewards, non_score_rewards); both are 0 on masked positions. Ziegler et al. 2019, eq. 2.
    """
    mask = mask.to(kl.dtype)
    non_score = -kl_coef * kl * mask  # (B, R)
    rewards = non_score.clone()
    rows = torch.arange(kl.shape[0], device=kl.device)
    rewards[rows, last_token_index(mask)] += scores.to(kl.dtype)
    return rewards, non_score


def gae_advantages(
    values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016, eq. 16) over (B, R) tensors.

    delta_t = r_t + gamma V_{t+1} - V_t;  A_t = delta_t + gamma lam A_{t+1}.  Masked positions (padding,
    tokens after EOS: always at the end of a row) have V = r = 0, so the episode ends at the last real
    token. Returns (advantages, returns = advantages + values), both unwhitened and 0 where masked.
    """
    mask = mask.to(values.dtype)
    values, rewards = values * mask, rewards * mask
    advantages_reversed = []
    last_gae = torch.zeros_like(values[:, 0])
    length = values.shape[1]
    for t in reversed(range(length)):
        next_value = values[:, t + 1] if t + 1 < length else torch.zeros_like(last_gae)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last_gae = delta + gamma * lam * last_gae
        advantages_reversed.append(last_gae)
    advantages = torch.stack(advantages_reversed[::-1], dim=1) * mask  # (B, R)
    return advantages, (advantages + values) * mask


def group_ids(queries: list[torch.Tensor]) -> torch.Tensor:
    """(B,) long: rows whose query token ids are equal share a group id (in order of first appearance)."""
    seen: dict[tuple, int] = {}
    return torch.tensor([seen.setdefault(tuple(q.tolist()), len(seen)) for q in queries], dtype=torch.long)


def rloo_advantages(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out advantages (Ahmadian et al. 2024, "Back to Basics", eq. 5), shape (B,).

    A_i = r_i - mean of the other answers to the same prompt: the baseline comes from the group itself, so
    no value head is needed and the baseline is unbiased. A row alone in its group is compared with the mean
    of all other rows of the batch instead (there is nothing else to compare it with).
    """
    rewards = rewards.double()
    n_groups = int(groups.max()) + 1
    group_sum = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, groups, rewards)
    group_count = torch.bincount(groups, minlength=n_groups).to(rewards.dtype)
    count = group_count[groups]
    others_in_group = (group_sum[groups] - rewards) / (count - 1).clamp(min=1)
    others_in_batch = (rewards.sum() - rewards) / max(len(rewards) - 1, 1)
    baseline = torch.where(count > 1, others_in_group, others_in_batch)
    return (rewards - baseline).float()


def ppo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate objective (Schulman et al. 2017, eq. 7), as a loss to minimise.

    Returns (loss, stats) with stats: clipfrac (share of tokens where the clipped term is the larger
    loss), approxkl (0.5 E[(log p_new - log p_old)^2], the k2 estimator), ratio (mean ratio).
    """
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    losses = -advantages * ratio
    losses_clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    loss = masked_mean(torch.max(losses, losses_clipped), mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean((losses_clipped > losses).to(logprobs.dtype), mask),
            "approxkl": 0.5 * masked_mean(log_ratio.square(), mask),
            "ratio": masked_mean(ratio, mask),
        }
    return loss, stats


def ppo_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss 0.5 E[max((V - R)^2, (clip(V, V_old +- c) - R)^2)] (as in OpenAI baselines' PPO2).

    Returns (loss, stats) with stats: clipfrac (share of tokens where the clipped error is larger),
    error (mean squared error of the unclipped prediction).
    """
    values_clipped = clip_by_value(values, old_values - cliprange_value, old_values + cliprange_value)
    errors = (values - returns).square()
    errors_clipped = (values_clipped - returns).square()
    loss = 0.5 * masked_mean(torch.max(errors, errors_clipped), mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean((errors_clipped > errors).to(values.dtype), mask),
            "error": masked_mean(errors, mask),
        }
    return loss, stats


# ---- preference losses: pairwise reward (Bradley-Terry) and DPO/IPO/hinge ------------------------


def pairwise_reward_loss(
    r_chosen: torch.Tensor,
    r_rejected: torch.Tensor,
    margin: torch.Tensor | None = None,
    center_coef: float = 0.0,
) -> torch.Tensor:
    """Bradley-Terry loss, mean over pairs: -log sigmoid(r_c - r_r - margin) + c * mean((r_c + r_r)^2).

    The margin (Llama 2, Touvron et al. 2023, Eq. 2) asks for a larger gap on clearly-preferred pairs.
    The centering term (Eisenstein et al. 2023) pins the mean reward near 0, since the pairwise loss
    alone only sees differences and lets the rewards drift.
    """
    diff = r_chosen - r_rejected
    if margin is not None:
        diff = diff - margin
    # logsigmoid, not log(sigmoid(x)): stays finite when x is very negative.
    loss = -F.logsigmoid(diff).mean()
    if center_coef:
        loss = loss + center_coef * torch.mean((r_chosen + r_rejected) ** 2)
    return loss


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
    loss_type: str | list[str] = "sigmoid",
    label_smoothing: float = 0.0,
    loss_weights: list[float] | None = None,
    discopop_tau: float = 0.05,
    chosen_lengths: torch.Tensor | None = None,
    rejected_lengths: torch.Tensor | None = None,
    f_divergence_type: str = "reverse_kl",
    f_alpha_divergence_coef: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair preference losses from summed completion log-probs, and the implicit rewards.

    `loss_type`: any of TRL 1.16's DPO losses, or a list of them weighted by `loss_weights` (one pure function
    each in rlhf/dpo_losses.py, with its paper). The lengths (completion tokens per row) are read by the
    length-normalised losses (ipo, sigmoid_norm, sft); f_divergence_type is f-DPO's regulariser (TRL's).
    Rewards are beta * (log pi - log ref) per completion (Section 5, DPO paper), detached.
    """
    pairs = PairLogps(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                      chosen_lengths, rejected_lengths, f_divergence_type, f_alpha_divergence_coef)
    losses = dpo_losses(pairs, beta, loss_type, loss_weights, label_smoothing=label_smoothing, discopop_tau=discopop_tau)
    return losses, beta * pairs.chosen_logratios.detach(), beta * pairs.rejected_logratios.detach()


# ---- GRPO / RLOO (TRL 1.x): group advantages, clipped surrogate, KL to the reference, loss aggregation --------
# Rollouts come in contiguous groups: rows [g * G, (g + 1) * G) are the G answers to one prompt. A reward of NaN
# means "no reward" (every reward function returned None): such a row is left out of its group's statistics and
# gets advantage 0, so it cannot move the policy (TRL 1.x does the same).

GRPO_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo")


def nan_std(values: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    """Unbiased standard deviation ignoring NaNs (NaN where fewer than 2 values are present)."""
    dims = dim if dim is not None else tuple(range(values.dim()))
    mean = torch.nanmean(values, dim=dims, keepdim=True)
    count = (~torch.isnan(values)).sum(dim=dims, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dims, keepdim=True) * count / (count - 1)
    variance = torch.where(count > 1, variance, torch.full_like(variance, float("nan")))
    std = variance.sqrt()
    if keepdim:
        return std
    return std.squeeze(dim) if dim is not None else std.reshape(())


def group_relative_advantages(
    rewards: torch.Tensor, num_generations: int, scale_rewards: str = "group", eps: float = 1e-4
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO's advantages (Shao et al. 2024, DeepSeekMath, Sec. 4.1.2): A_i = (r_i - mean of its group) / (std + eps).

    scale_rewards: "group" divides by the group's std, "batch" by the std of the whole batch (PPO Lite), "none"
    not at all (Dr. GRPO: the std brings in a question-difficulty bias). Returns (advantages, the std per row,
    used or not); a NaN reward gives advantage 0.
    """
    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not make whole groups of num_generations={num_generations}")
    grouped = rewards.view(-1, num_generations)  # (P, G)
    mean = torch.nanmean(grouped, dim=1, keepdim=True).expand_as(grouped).reshape(-1)
    if scale_rewards in ("group", "none"):
        std = nan_std(grouped, dim=1, keepdim=True).expand_as(grouped).reshape(-1)
    elif scale_rewards == "batch":
        std = nan_std(rewards).expand_as(rewards)
    else:
        raise ValueError(f"scale_rewards={scale_rewards!r}: must be group, batch or none")
    advantages = rewards - mean
    if scale_rewards != "none":
        advantages = advantages / (std + eps)
    return torch.nan_to_num(advantages, nan=0.0), std


def leave_one_out_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """RLOO's advantages (Ahmadian et al. 2024, eq. 5) for contiguous groups: A_i = r_i - mean of the OTHER scored
    answers of its group. A row without reward, or the only scored row of its group, gets 0 (TRL 1.x's
    RLOOTrainer; rloo_advantages above is the classic PPO step's version, which takes arbitrary group ids and
    falls back to the batch for a lone row)."""
    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not make whole groups of num_generations={num_generations}")
    grouped = rewards.view(-1, num_generations)  # (P, G)
    scored = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    baseline = (torch.nansum(grouped, dim=1, keepdim=True) - grouped) / (scored - 1)  # 0/0 = NaN -> 0 below
    return torch.nan_to_num((grouped - baseline).reshape(-1), nan=0.0)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) by Schulman's k3 estimator, exp(q - p) - (q - p) - 1 with p, q the policy's
    and the reference's log-probs of the sampled token: unbiased, always >= 0 (GRPO's KL term, eq. 4)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


def clipped_surrogate(
    log_ratio: torch.Tensor, advantages: torch.Tensor, epsilon_low: float, epsilon_high: float,
    delta: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) elementwise, r = exp(log_ratio) (PPO's eq. 7 with DAPO's
    asymmetric clip); `delta` also caps r from above (INTELLECT-2's two-sided clip). Works per token (GRPO) or per
    sequence (RLOO). Returns (losses, masks of where the clip bites: low, high, region), TRL's definitions."""
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    unclipped = torch.clamp(ratio, max=delta) if delta is not None else ratio
    losses = -torch.min(unclipped * advantages, clipped * advantages)
    with torch.no_grad():
        low = (ratio < 1 - epsilon_low) & (advantages < 0)
        high = (ratio > 1 + epsilon_high) & (advantages > 0)
    return losses, {"low": low, "high": high, "region": low | high}


def aggregate_token_losses(
    per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str,
    max_completion_length: int | None = None, num_active_tokens: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """One loss from (B, T) per-token losses, as each GRPO variant normalises them:
    grpo: mean over answers of each answer's token mean (favours short right answers, long wrong ones);
    bnpo: sum over this batch's tokens / their number; dr_grpo: sum / (B * max_completion_length) (Dr. GRPO);
    dapo: sum / num_active_tokens, the tokens of the whole accumulation window (DAPO's token-level loss), so every
    token of an optimizer step weighs the same."""
    mask = mask.to(per_token_loss.dtype)
    total = (per_token_loss * mask).sum()
    if loss_type == "grpo":
        return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return total / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length")
        return total / (per_token_loss.shape[0] * max_completion_length)
    if loss_type == "dapo":
        if num_active_tokens is None:
            raise ValueError("loss_type='dapo' needs num_active_tokens (the accumulation window's token count)")
        return total / torch.as_tensor(num_active_tokens, dtype=total.dtype).clamp(min=1.0)
    raise ValueError(f"loss_type={loss_type!r}: must be one of {', '.join(GRPO_LOSS_TYPES)}")


# ---- KTO (Ethayarajh et al. 2024): unpaired desirable / undesirable answers ---------------------------------


def kto_kl_estimate(kl_logps: torch.Tensor, ref_kl_logps: torch.Tensor) -> torch.Tensor:
    """KTO's reference point z0: KL(policy || reference) estimated on mismatched (prompt, answer) pairs, the mean
    of log pi(y'|x) - log ref(y'|x), clamped at 0 (a KL is never negative) and detached (no gradient, Sec. 4.1)."""
    return (kl_logps - ref_kl_logps).mean().detach().clamp(min=0)


def kto_loss(
    policy_logps: torch.Tensor, ref_logps: torch.Tensor, labels: torch.Tensor, kl: torch.Tensor | float,
    beta: float, desirable_weight: float = 1.0, undesirable_weight: float = 1.0, loss_type: str = "kto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example KTO losses and implicit rewards beta * log(pi / ref), from summed completion log-probs (B,).

    kto (eq. 7, KTO paper): desirable w_d (1 - sigmoid(beta (r - z0))), undesirable w_u (1 - sigmoid(beta (z0 - r)))
    with r = log pi(y|x) - log ref(y|x) and z0 the KL estimate. apo_zero_unpaired (APO paper, eq. 7, unpaired):
    desirable 1 - sigmoid(beta r), undesirable sigmoid(beta r), weighted the same way. The batch loss is their mean.
    """
    labels = labels.to(torch.bool)
    logratios = policy_logps - ref_logps
    kl = torch.as_tensor(kl, dtype=logratios.dtype, device=logratios.device)
    if loss_type == "kto":
        desirable = 1 - torch.sigmoid(beta * (logratios - kl))
        undesirable = 1 - torch.sigmoid(beta * (kl - logratios))
    elif loss_type == "apo_zero_unpaired":
        desirable = 1 - torch.sigmoid(beta * logratios)
        undesirable = torch.sigmoid(beta * logratios)
    else:
        raise ValueError(f"loss_type={loss_type!r}: must be 'kto' or 'apo_zero_unpaired'")
    losses = torch.where(labels, desirable_weight * desirable, undesirable_weight * undesirable)
    return losses, beta * logratios.detach()
