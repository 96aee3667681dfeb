"""TRL 1.16's DPO losses (rlhf/dpo_losses.py) against hand-computed values of TRL's formulas.

One pair unless said otherwise: policy chosen -10, rejected -12; reference -11 for both, so the chosen
log-ratio is +1, the rejected -1 and the margin (DPO's logits) 2. With beta 0.5: beta * margin = 1,
beta * chosen log-ratio = 0.5, beta * rejected log-ratio = -0.5.
Values used: -log sigmoid(1) = 0.313262, -log sigmoid(-1) = 1.313262, -log sigmoid(0.5) = 0.474077,
-log sigmoid(-0.5) = 0.974077, sigmoid(1) = 0.731059, sigmoid(0.5) = 0.622459, e^-1 = 0.367879.
"""
from __future__ import annotations

import pytest
import torch

from rlhf.dpo_losses import DPO_LOSS_TYPES, LABEL_SMOOTHING_LOSSES, PairLogps, dpo_losses
from rlhf.losses import dpo_loss


def pair(chosen_len: float | None = None, rejected_len: float | None = None) -> PairLogps:
    lengths = (None, None) if chosen_len is None else (torch.tensor([chosen_len]), torch.tensor([rejected_len]))
    return PairLogps(torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-11.0]), torch.tensor([-11.0]), *lengths)


def one(loss_type, beta=0.5, b=None, **options) -> float:
    return dpo_losses(b or pair(), beta, loss_type, **options).item()


def test_every_trl_116_loss_is_here():
    # TRL 1.16 DPOConfig.loss_type help lists these 15.
    assert set(DPO_LOSS_TYPES) == {"sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard",
                                   "aot", "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm"}
    assert set(LABEL_SMOOTHING_LOSSES) == {"sigmoid", "exo_pair", "robust", "aot", "aot_unpaired"}


def test_sigmoid_hinge_hand_values():
    assert one("sigmoid") == pytest.approx(0.313262, abs=1e-6)  # -log sigmoid(1)
    assert one("hinge") == pytest.approx(0.0)  # relu(1 - 1)
    assert one("hinge", beta=0.25) == pytest.approx(0.5)  # relu(1 - 0.25 * 2)


def test_ipo_is_length_normalised_as_in_trl():
    # chosen 2 tokens, rejected 4: per-token margin 1/2 - (-1/4) = 0.75; (0.75 - 1 / (2 * 0.5))^2 = 0.0625
    assert one("ipo", b=pair(2, 4)) == pytest.approx(0.0625)
    # no lengths: each completion one token, margin 2: (2 - 1)^2 = 1
    assert one("ipo") == pytest.approx(1.0)


def test_exo_pair_hand_value_and_needs_label_smoothing():
    # q = (sigmoid(1), sigmoid(-1)) = (0.731059, 0.268941); p = (0.999, 0.001), log p = (-0.0010005, -6.907755)
    # 0.731059 * (-0.313262 + 0.0010005) + 0.268941 * (-1.313262 + 6.907755) = -0.228283 + 1.504589 = 1.276306
    assert one("exo_pair", label_smoothing=1e-3) == pytest.approx(1.276310, abs=1e-5)
    with pytest.raises(ValueError, match="label_smoothing=0.0: the exo_pair loss needs it > 0"):
        one("exo_pair")


def test_nca_bco_hand_values():
    # nca: -log sigmoid(0.5) - 0.5 log sigmoid(-0.5) - 0.5 log sigmoid(0.5) = 0.474077 + 0.487038 + 0.237038
    assert one("nca_pair") == pytest.approx(1.198154, abs=1e-6)
    # bco_pair: -log sigmoid(0.5) - log sigmoid(-(-0.5)) = 2 * 0.474077
    assert one("bco_pair") == pytest.approx(0.948154, abs=1e-6)


def test_robust_hand_value_and_reduces_to_sigmoid():
    # eps 0.1: (0.9 * 0.313262 - 0.1 * 1.313262) / (1 - 0.2) = (0.281936 - 0.131326) / 0.8 = 0.188262
    assert one("robust", label_smoothing=0.1) == pytest.approx(0.188262, abs=1e-6)
    assert one("robust") == pytest.approx(one("sigmoid"))
    with pytest.raises(ValueError, match="label_smoothing=0.5"):
        one("robust", label_smoothing=0.5)


def test_sppo_hard_hand_values():
    # beta 0.5: (1 - 1)^2 + (-1 + 1)^2 = 0; beta 1: (1 - 0.5)^2 + (-1 + 0.5)^2 = 0.5
    assert one("sppo_hard") == pytest.approx(0.0)
    assert one("sppo_hard", beta=1.0) == pytest.approx(0.5)


def test_apo_hand_values():
    # zero: 1 - sigmoid(0.5) + sigmoid(-0.5) = 1 - 0.622459 + 0.377541 = 0.755082
    assert one("apo_zero") == pytest.approx(0.755081, abs=1e-6)
    # down: sigmoid(0.5) + 1 - sigmoid(1) = 0.622459 + 1 - 0.731059 = 0.891400
    assert one("apo_down") == pytest.approx(0.891401, abs=1e-6)


def test_discopop_hand_values():
    # tau 1: w = sigmoid(1) = 0.731059; 0.268941 * 0.313262 + 0.731059 * 0.367879 = 0.084249 + 0.268941 = 0.353190
    assert one("discopop", discopop_tau=1.0) == pytest.approx(0.353190, abs=1e-6)
    # TRL's default tau 0.05: w = sigmoid(20) ~ 1, so the loss is ~ e^-1
    assert one("discopop") == pytest.approx(0.367879, abs=1e-6)


def test_sft_and_sigmoid_norm_hand_values():
    two = PairLogps(torch.tensor([-10.0, -6.0]), torch.tensor([-12.0, -7.0]), torch.tensor([-11.0, -6.0]),
                    torch.tensor([-11.0, -7.0]), torch.tensor([5, 3]), torch.tensor([4, 4]))
    # sft: -(-10 - 6) / (5 + 3) = 2.0 in every row
    assert dpo_losses(two, 0.5, "sft").tolist() == pytest.approx([2.0, 2.0])
    # sigmoid_norm, lengths 2 and 4: per-token margin 0.75; -log sigmoid(0.5 * 0.75) = log(1 + e^-0.375) = 0.523123
    assert one("sigmoid_norm", b=pair(2, 4)) == pytest.approx(0.523123, abs=1e-6)
    # all lengths 1: the sigmoid loss
    assert one("sigmoid_norm", b=pair(1, 1)) == pytest.approx(one("sigmoid"))


def test_aot_sorts_over_the_batch():
    # pair 1 as above; pair 2: policy -11 / -10, reference -10 / -13.
    b = PairLogps(torch.tensor([-10.0, -11.0]), torch.tensor([-12.0, -10.0]), torch.tensor([-11.0, -10.0]),
                  torch.tensor([-11.0, -13.0]))
    # aot: policy log-odds (2, -1) sorted (-1, 2); reference (0, 3) sorted (0, 3); delta (-1, -1);
    # -log sigmoid(0.5 * -1) = 0.974077 for both (unsorted it would be 0.313262 and 2.126928)
    assert dpo_losses(b, 0.5, "aot").tolist() == pytest.approx([0.974077, 0.974077], abs=1e-6)
    # aot_unpaired: chosen log-ratios (1, -1) sorted (-1, 1); rejected (-1, 3) sorted (-1, 3); delta (0, -2)
    # -log sigmoid(0) = 0.693147, -log sigmoid(-1) = 1.313262
    assert dpo_losses(b, 0.5, "aot_unpaired").tolist() == pytest.approx([0.693147, 1.313262], abs=1e-6)


def test_list_of_losses_with_weights():
    assert one(["sigmoid"]) == pytest.approx(one("sigmoid"))
    # MPO-style mix: 0.8 * 0.313262 + 0.2 * sft (-(-10) / 5 = 2.0) = 0.250610 + 0.4 = 0.650610
    assert one(["sigmoid", "sft"], b=pair(5, 4), loss_weights=[0.8, 0.2]) == pytest.approx(0.650609, abs=1e-6)
    # no weights: each 1.0
    assert one(["sigmoid", "bco_pair"]) == pytest.approx(0.313262 + 0.948154, abs=1e-6)
    with pytest.raises(ValueError, match="loss_weights=\\[1.0\\]: needs one weight per loss_type entry \\(2\\)"):
        one(["sigmoid", "hinge"], loss_weights=[1.0])
    with pytest.raises(ValueError, match="loss_type='kto'"):
        one(["sigmoid", "kto"])


def test_dpo_loss_wrapper_passes_lengths_and_rewards():
    pc, pr, rc, rr = torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-11.0]), torch.tensor([-11.0])
    losses, chosen_rewards, rejected_rewards = dpo_loss(pc, pr, rc, rr, beta=0.5, loss_type=["ipo"],
                                                        chosen_lengths=torch.tensor([2]), rejected_lengths=torch.tensor([4]))
    assert losses.item() == pytest.approx(0.0625)
    assert (chosen_rewards.item(), rejected_rewards.item()) == pytest.approx((0.5, -0.5))


@pytest.mark.parametrize("loss_type", DPO_LOSS_TYPES)
def test_every_loss_is_finite_and_raising_the_chosen_completion_lowers_it(loss_type):
    # Not for the squared losses (ipo, sppo_hard: the sign depends on which side of the target the margin is)
    # nor apo_down (sigmoid(b c) - sigmoid(b (c - r)): its sign depends on both log-ratios).
    gen = torch.Generator().manual_seed(0)
    pc = (-20 * torch.rand(6, generator=gen, dtype=torch.float64)).requires_grad_()
    pr, rc, rr = (-20 * torch.rand(6, generator=gen, dtype=torch.float64) for _ in range(3))
    b = PairLogps(pc, pr, rc, rr, torch.full((6,), 5.0), torch.full((6,), 5.0))
    loss = dpo_losses(b, 0.3, loss_type, label_smoothing=0.01).mean()
    loss.backward()
    assert torch.isfinite(loss)
    if loss_type not in ("sppo_hard", "ipo", "apo_down"):
        assert (pc.grad <= 0).all() and (pc.grad < 0).any()  # hinge is flat past its margin


def test_f_divergence_scores_hand_values():
    # chosen log-ratio u = 1, rejected u = -1, beta 0.5, sigmoid loss on beta * (score_c - score_r)
    def f(kind, **kw):
        logps = (torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-11.0]), torch.tensor([-11.0]))
        return one("sigmoid", b=PairLogps(*logps, f_divergence=kind, **kw))
    # forward KL: 1 - e^-u: 0.632121 and -1.718282, margin 2.350402; -log sigmoid(1.175201) = 0.269078
    assert f("forward_kl") == pytest.approx(0.269078, abs=1e-6)
    # JS: log 2 + log sigmoid(u): 0.379885 and -0.620115, margin 1.0; -log sigmoid(0.5) = 0.474077
    assert f("js_divergence") == pytest.approx(0.474077, abs=1e-6)
    # alpha 0.5: (e^(-0.5 u) - 1) / -0.5: 0.786939 and -1.297443, margin 2.084381; -log sigmoid(1.042191) = 0.302089
    assert f("alpha_divergence") == pytest.approx(0.302089, abs=1e-6)
    assert f("alpha_divergence", f_alpha=1.0) == pytest.approx(one("sigmoid"))  # alpha -> 1: reverse KL
    assert f("reverse_kl") == pytest.approx(0.313262, abs=1e-6)


def test_f_divergence_only_for_the_score_difference_losses():
    b = PairLogps(torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-11.0]), torch.tensor([-11.0]),
                  f_divergence="forward_kl")
    with pytest.raises(ValueError, match="f_divergence_type='forward_kl': only the sigmoid, sigmoid_norm"):
        dpo_losses(b, 0.5, ["sigmoid", "bco_pair"])
    with pytest.raises(ValueError, match="f_divergence_type='chi2': must be one of"):
        dpo_losses(PairLogps(*(torch.zeros(1),) * 4, f_divergence="chi2"), 0.5, "sigmoid")


def test_ld_token_weights_hand_values():
    from rlhf.dpo_losses import ld_token_weights

    # [chosen; rejected] of 2 pairs: pair 1 chosen 3 tokens, rejected 4 (shared 3);
    # pair 2 chosen 2, rejected 1 (shared 1)
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 1, 1, 0, 0], [0, 1, 1, 1, 1], [0, 1, 0, 0, 0]])
    assert ld_token_weights(mask, 0.5).tolist() == [
        [0, 1, 1, 1, 0],  # chosen 1: within the shared 3
        [0, 1, 0.5, 0, 0],  # chosen 2: its 2nd token is past the shared 1
        [0, 1, 1, 1, 0.5],  # rejected 1: its 4th token is past the shared 3
        [0, 1, 0, 0, 0],
    ]
    assert torch.equal(ld_token_weights(mask, 1.0), mask.float())  # ld_alpha 1: the plain sums
