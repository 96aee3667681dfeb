"""DPO's preference losses (TRL 1.16's `DPOConfig.loss_type` values), one pure function each.

Every loss takes a `PairLogps` (summed completion log-probs of policy and reference, plus completion lengths)
and `beta`, and returns the per-pair loss (B,). `dpo_losses` combines a list of them with weights, as TRL 1.x
does for `loss_type=[...]` with `loss_weights` (MPO): loss = sum_k w_k * mean(loss_k), here kept per pair as
sum_k w_k * loss_k so its mean is TRL's loss. Formulas follow TRL 1.16's DPOTrainer._compute_loss; the paper
each comes from is named on the function. `f_divergence` (TRL's f_divergence_type, f-DPO, Wang et al. 2023)
replaces each log-ratio u by f'(exp u) in the losses built on the chosen-rejected score difference.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

F_DIVERGENCES = ("reverse_kl", "forward_kl", "js_divergence", "alpha_divergence")
# The losses built on the chosen-rejected score difference; TRL refuses another f-divergence for the rest.
F_DIVERGENCE_LOSSES = ("sigmoid", "sigmoid_norm", "hinge", "ipo", "exo_pair", "robust", "discopop", "sft")


def f_divergence_scores(logratios: torch.Tensor, kind: str = "reverse_kl", alpha: float = 0.5) -> torch.Tensor:
    """f'(t) at t = pi / ref = exp(u), u the log-ratio (f-DPO, Wang et al. 2023, Table 1):
    reverse_kl: u (standard DPO); forward_kl: 1 - exp(-u); js_divergence: log 2 + log sigmoid(u);
    alpha_divergence: (exp((alpha - 1) u) - 1) / (alpha - 1), u itself at alpha = 1 (its limit)."""
    if kind == "reverse_kl":
        return logratios
    if kind == "forward_kl":
        return 1 - torch.exp(-logratios)
    if kind == "js_divergence":
        return math.log(2) + F.logsigmoid(logratios)
    if kind == "alpha_divergence":
        if abs(alpha - 1.0) < 1e-6:
            return logratios
        # exp's argument clamped (as TRL) so it stays finite in the tensor's dtype
        clamp_max = {torch.float16: 11.0}.get(logratios.dtype, 80.0)
        t = torch.clamp(((alpha - 1.0) * logratios).float(), max=clamp_max)
        return ((torch.exp(t) - 1.0) / (alpha - 1.0)).to(logratios.dtype)
    raise ValueError(f"f_divergence_type={kind!r}: must be one of {', '.join(F_DIVERGENCES)}")


@dataclass(frozen=True)
class PairLogps:
    """One batch of preference pairs, each tensor (B,).

    `*_logps` are log-probs summed over each completion's tokens; `*_lengths` count those tokens (the
    length-normalised losses ipo, sigmoid_norm and sft need them; None counts every completion as one token).
    """

    policy_chosen: torch.Tensor
    policy_rejected: torch.Tensor
    ref_chosen: torch.Tensor
    ref_rejected: torch.Tensor
    chosen_lengths: torch.Tensor | None = None
    rejected_lengths: torch.Tensor | None = None
    f_divergence: str = "reverse_kl"
    f_alpha: float = 0.5

    @property
    def chosen_logratios(self) -> torch.Tensor:
        """log pi(y_c) - log ref(y_c)."""
        return self.policy_chosen - self.ref_chosen

    @property
    def rejected_logratios(self) -> torch.Tensor:
        """log pi(y_r) - log ref(y_r)."""
        return self.policy_rejected - self.ref_rejected

    @property
    def chosen_scores(self) -> torch.Tensor:
        """f'(pi / ref) of the chosen completion: its log-ratio under the default reverse KL."""
        return f_divergence_scores(self.chosen_logratios, self.f_divergence, self.f_alpha)

    @property
    def rejected_scores(self) -> torch.Tensor:
        return f_divergence_scores(self.rejected_logratios, self.f_divergence, self.f_alpha)

    @property
    def margin(self) -> torch.Tensor:
        """DPO's logits: chosen score minus rejected score (the log-ratios' difference under reverse KL)."""
        return self.chosen_scores - self.rejected_scores

    def lengths(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(chosen, rejected) token counts, at least 1 (TRL clamps them the same way)."""
        ones = torch.ones_like(self.policy_chosen)
        chosen = ones if self.chosen_lengths is None else self.chosen_lengths.to(ones.dtype)
        rejected = ones if self.rejected_lengths is None else self.rejected_lengths.to(ones.dtype)
        return chosen.clamp(min=1.0), rejected.clamp(min=1.0)


def _smoothed_logistic(z: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    # -(1 - eps) log sigmoid(z) - eps log sigmoid(-z): the logistic loss with a share eps of labels flipped.
    return -F.logsigmoid(z) * (1 - label_smoothing) - F.logsigmoid(-z) * label_smoothing


def sigmoid_loss(b: PairLogps, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """-log sigmoid(beta * margin) (Eq. 7, DPO paper, Rafailov et al. 2023).

    label_smoothing eps > 0 gives conservative DPO (Mitchell 2023; TRL 0.x applied it to this loss, TRL 1.16 only
    to robust/exo_pair/aot): -(1 - eps) log sigmoid(beta m) - eps log sigmoid(-beta m).
    """
    return _smoothed_logistic(beta * b.margin, label_smoothing)


def hinge_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """relu(1 - beta * margin) (SLiC, Zhao et al. 2023; RSO, Liu et al. 2023)."""
    return torch.relu(1 - beta * b.margin)


def ipo_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """(m - 1 / (2 beta))^2 with m the per-token margin: each log-ratio divided by its completion's length
    (Eq. 17, IPO paper, Azar et al. 2023; TRL normalises by length as the IPO authors did)."""
    chosen_len, rejected_len = b.lengths()
    margin = b.chosen_scores / chosen_len - b.rejected_scores / rejected_len
    return (margin - 1 / (2 * beta)) ** 2


def exo_pair_loss(b: PairLogps, beta: float, label_smoothing: float = 1e-3) -> torch.Tensor:
    """KL(q || p) over {chosen, rejected} with q = softmax of beta * log-ratios and p = (1 - eps, eps)
    (EXO, Ji et al. 2024, Eq. 16); eps is label_smoothing and must be > 0."""
    if not label_smoothing > 0:
        raise ValueError(f"label_smoothing={label_smoothing!r}: the exo_pair loss needs it > 0 (the EXO paper uses 1e-3)")
    z = beta * b.margin
    q_chosen, q_rejected = torch.sigmoid(z), torch.sigmoid(-z)
    return (q_chosen * (F.logsigmoid(z) - math.log1p(-label_smoothing))
            + q_rejected * (F.logsigmoid(-z) - math.log(label_smoothing)))


def nca_pair_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """-log sigmoid(r_c) - 0.5 log sigmoid(-r_c) - 0.5 log sigmoid(-r_r), r = beta * log-ratio
    (NCA, Chen et al. 2024)."""
    r_chosen, r_rejected = beta * b.chosen_logratios, beta * b.rejected_logratios
    return -F.logsigmoid(r_chosen) - 0.5 * F.logsigmoid(-r_chosen) - 0.5 * F.logsigmoid(-r_rejected)


def robust_loss(b: PairLogps, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """Unbiased loss under labels flipped with probability eps (rDPO, Chowdhury et al. 2024, Eq. 8):
    (-(1 - eps) log sigmoid(beta m) + eps log sigmoid(-beta m)) / (1 - 2 eps)."""
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing={label_smoothing!r}: the robust loss needs it in [0, 0.5)")
    z = beta * b.margin
    return (-(1 - label_smoothing) * F.logsigmoid(z) + label_smoothing * F.logsigmoid(-z)) / (1 - 2 * label_smoothing)


def bco_pair_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """-log sigmoid(r_c) - log sigmoid(-r_r), r = beta * log-ratio (BCO, Jung et al. 2024, paired form, as in
    TRL 1.16: no running reward mean is subtracted, unlike TRL 0.x's bco_pair)."""
    return -F.logsigmoid(beta * b.chosen_logratios) - F.logsigmoid(-beta * b.rejected_logratios)


def sppo_hard_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """(chosen log-ratio - 1 / (2 beta))^2 + (rejected log-ratio + 1 / (2 beta))^2 (SPPO, Wu et al. 2024,
    Eq. 4.7 with hard win probabilities 1 and 0)."""
    return (b.chosen_logratios - 0.5 / beta) ** 2 + (b.rejected_logratios + 0.5 / beta) ** 2


def aot_loss(b: PairLogps, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """AOT paired (Melnyk et al. 2024): the batch's policy log-odds (log pi(y_c) - log pi(y_r)) and the
    reference's, each sorted, then the smoothed logistic loss on their difference."""
    policy_sorted, _ = torch.sort(b.policy_chosen - b.policy_rejected, dim=0)
    ref_sorted, _ = torch.sort(b.ref_chosen - b.ref_rejected, dim=0)
    return _smoothed_logistic(beta * (policy_sorted - ref_sorted), label_smoothing)


def aot_unpaired_loss(b: PairLogps, beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """AOT unpaired (Melnyk et al. 2024): chosen and rejected log-ratios each sorted over the batch."""
    chosen_sorted, _ = torch.sort(b.chosen_logratios, dim=0)
    rejected_sorted, _ = torch.sort(b.rejected_logratios, dim=0)
    return _smoothed_logistic(beta * (chosen_sorted - rejected_sorted), label_smoothing)


def apo_zero_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """1 - sigmoid(beta * chosen log-ratio) + sigmoid(beta * rejected log-ratio) (APO-zero, D'Oosterlinck et al.
    2024, Eq. 7): raise the chosen likelihood, lower the rejected one (chosen answers better than the model's)."""
    return 1 - torch.sigmoid(beta * b.chosen_logratios) + torch.sigmoid(beta * b.rejected_logratios)


def apo_down_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """sigmoid(beta * chosen log-ratio) + 1 - sigmoid(beta * margin) (APO-down, Eq. 8): lower both likelihoods,
    the rejected one more (chosen answers worse than the model's)."""
    return torch.sigmoid(beta * b.chosen_logratios) + 1 - torch.sigmoid(beta * (b.chosen_logratios - b.rejected_logratios))


def discopop_loss(b: PairLogps, beta: float, discopop_tau: float = 0.05) -> torch.Tensor:
    """Log-ratio modulated loss (DiscoPOP, Chris Lu et al. 2024, Eq. 5): with z = beta * margin and
    w = sigmoid(z / tau), (1 - w) * -log sigmoid(z) + w * exp(-z)."""
    z = beta * b.margin
    w = torch.sigmoid(z / discopop_tau)
    return -F.logsigmoid(z) * (1 - w) + torch.exp(-z) * w


def sft_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """Negative log-likelihood per chosen token over the whole batch (TRL's 'sft' term of MPO), the same number
    in every row so the mean over pairs is that value: -sum(chosen log-probs) / sum(chosen lengths)."""
    chosen_len, _ = b.lengths()
    return (-b.policy_chosen.sum() / chosen_len.sum()).expand_as(b.policy_chosen)


def sigmoid_norm_loss(b: PairLogps, beta: float) -> torch.Tensor:
    """-log sigmoid(beta * per-token margin): DPO on log-ratios divided by completion length (TRL 1.16)."""
    chosen_len, rejected_len = b.lengths()
    return -F.logsigmoid(beta * (b.chosen_scores / chosen_len - b.rejected_scores / rejected_len))


DPO_LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "sigmoid": sigmoid_loss,
    "hinge": hinge_loss,
    "ipo": ipo_loss,
    "exo_pair": exo_pair_loss,
    "nca_pair": nca_pair_loss,
    "robust": robust_loss,
    "bco_pair": bco_pair_loss,
    "sppo_hard": sppo_hard_loss,
    "aot": aot_loss,
    "aot_unpaired": aot_unpaired_loss,
    "apo_zero": apo_zero_loss,
    "apo_down": apo_down_loss,
    "discopop": discopop_loss,
    "sft": sft_loss,
    "sigmoid_norm": sigmoid_norm_loss,
}
DPO_LOSS_TYPES = tuple(DPO_LOSSES)
# The losses that read label_smoothing (the others ignore it, as in TRL).
LABEL_SMOOTHING_LOSSES = tuple(name for name, fn in DPO_LOSSES.items() if "label_smoothing" in inspect.signature(fn).parameters)


def ld_token_weights(completion_mask: torch.Tensor, ld_alpha: float) -> torch.Tensor:
    """Per-token weights (2B, T) of the `[chosen; rejected]` batch for LD-DPO (Liu et al. 2024, TRL's ld_alpha):
    1 on each completion's first min(len_chosen, len_rejected) tokens (the length both share), ld_alpha on the
    longer completion's tail beyond it, 0 off the completion. Summing log-probs with them desensitises DPO to
    length (ld_alpha 1: plain sums; 0: only the shared length counts)."""
    mask = completion_mask.float()
    position = mask.cumsum(dim=-1)  # 1, 2, ... along each completion
    lengths = mask.sum(dim=-1)
    chosen, rejected = lengths.chunk(2)
    shared = torch.minimum(chosen, rejected).repeat(2)[:, None]  # (2B, 1)
    return mask * torch.where(position <= shared, 1.0, ld_alpha)


def loss_type_list(loss_type: str | Sequence[str]) -> list[str]:
    """TRL 1.x's `loss_type`: one name or a list of names; raises on an unknown name or an empty list."""
    names = [loss_type] if isinstance(loss_type, str) else list(loss_type)
    if not names:
        raise ValueError("loss_type=[]: give at least one loss")
    for name in names:
        if name not in DPO_LOSSES:
            raise ValueError(f"loss_type={name!r}: must be one of {', '.join(DPO_LOSS_TYPES)}")
    return names


def dpo_losses(
    b: PairLogps,
    beta: float,
    loss_type: str | Sequence[str] = "sigmoid",
    loss_weights: Sequence[float] | None = None,
    label_smoothing: float = 0.0,
    discopop_tau: float = 0.05,
) -> torch.Tensor:
    """Per-pair loss (B,): sum_k loss_weights[k] * loss_k (weights default to 1 each, as in TRL)."""
    names = loss_type_list(loss_type)
    if b.f_divergence != "reverse_kl" and not set(names) <= set(F_DIVERGENCE_LOSSES):
        raise ValueError(f"f_divergence_type={b.f_divergence!r}: only the {', '.join(F_DIVERGENCE_LOSSES)} losses "
                         f"take another f-divergence (loss_type {names})")
    weights = [1.0] * len(names) if loss_weights is None else list(loss_weights)
    if len(weights) != len(names):
        raise ValueError(f"loss_weights={weights!r}: needs one weight per loss_type entry ({len(names)})")
    options = {"label_smoothing": label_smoothing, "discopop_tau": discopop_tau}
    total = torch.zeros_like(b.policy_chosen)
    for name, weight in zip(names, weights):
        fn = DPO_LOSSES[name]
        accepted = inspect.signature(fn).parameters
        total = total + weight * fn(b, beta, **{k: v for k, v in options.items() if k in accepted})
    return total


__all__ = ["DPO_LOSSES", "DPO_LOSS_TYPES", "F_DIVERGENCES", "F_DIVERGENCE_LOSSES", "LABEL_SMOOTHING_LOSSES", "PairLogps",
           "dpo_losses", "f_divergence_scores", "ld_token_weights", "loss_type_list",
           *(fn.__name__ for fn in DPO_LOSSES.values())]
