"""The fp16 gradient scaler's state goes into PPO checkpoints: a resumed fp16 run goes on at the scale it had found
(a fresh scaler restarts at 65536 and skips overflowing steps until it halves back down). Checkpoints without it
(older ones, bf16/fp32 runs) still resume; one with it, resumed by a run without a scaler, warns.

CPU autocast has fp16, so the fp16 path runs here by making the precision selection answer fp16 (as
test_precision's fp16 test does)."""
import pytest
import torch

from rlhf.configs import PPOConfig
from rlhf.ppo import TRAINER_STATE_FILE, PPOTrainer
from tests.rlhf.test_ppo import SMALL_TOKENIZER, rollouts, small_vocab_model

CONFIG = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=1, learning_rate=1e-3, bf16=True)
FRESH_SCALE = 65536.0  # GradScaler's init_scale


def trainer(monkeypatch, fp16: bool, seed: int = 0) -> PPOTrainer:
    monkeypatch.setattr("rlhf.ppo.autocast_dtype",
                        lambda asked, device: (torch.float16 if fp16 else None) if asked else None)
    return PPOTrainer(CONFIG, small_vocab_model(seed), small_vocab_model(), SMALL_TOKENIZER)


def scaler_state(t: PPOTrainer) -> tuple[float, int]:
    return t.scaler.get_scale(), t.scaler._get_growth_tracker()


def test_a_resumed_fp16_run_keeps_the_scale_and_growth_tracker(monkeypatch, tmp_path):
    original = trainer(monkeypatch, fp16=True)
    original.step(*rollouts(4))
    # 2 optimizer steps without overflow: the tracker counts them towards the next growth (every 2000)
    assert scaler_state(original) == (FRESH_SCALE, 2)
    original.scaler.update(1024.0)  # the scale a run finds after overflows halved it (the tracker is kept)
    original.save_checkpoint(tmp_path)
    saved = torch.load(tmp_path / TRAINER_STATE_FILE, weights_only=True)["grad_scaler"]
    assert (saved["scale"], saved["_growth_tracker"]) == (1024.0, 2)

    resumed = trainer(monkeypatch, fp16=True, seed=5)
    assert scaler_state(resumed) == (FRESH_SCALE, 0)
    resumed.load_checkpoint(tmp_path)
    assert scaler_state(resumed) == (1024.0, 2)  # before the fix: 65536, 0
    # Both go on identically: the same scaled losses, the same updates, the tracker at 4.
    batch = rollouts(4, seed=2)
    stats_a, stats_b = original.step(*batch), resumed.step(*batch)
    assert scaler_state(resumed) == scaler_state(original) == (1024.0, 4)
    for key in ["ppo/loss/total", "objective/kl", "ppo/policy/approxkl"]:
        assert stats_a[key] == pytest.approx(stats_b[key], rel=1e-5, abs=1e-7)


def test_an_overflow_halves_the_scale_and_the_checkpoint_keeps_the_halved_scale(monkeypatch, tmp_path):
    original = trainer(monkeypatch, fp16=True)
    original.step(*rollouts(4))
    # An overflowing step: an inf gradient (what fp16 gives when the scale is too large) on one weight. Made by a
    # hook rather than a huge scale, so it does not depend on the autocast dtype the forward ends up in.
    weight = original.model.pretrained_model.model.layers[0].self_attn.q_proj.weight
    hook = weight.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    before = {n: p.detach().clone() for n, p in original.model.named_parameters()}
    original.step(*rollouts(4, seed=1))
    hook.remove()
    assert scaler_state(original) == (FRESH_SCALE / 4, 0)  # two skipped optimizer steps halve it twice; tracker reset
    assert all(torch.equal(before[n], p) for n, p in original.model.named_parameters())  # nothing was applied
    original.save_checkpoint(tmp_path)
    resumed = trainer(monkeypatch, fp16=True, seed=5)
    resumed.load_checkpoint(tmp_path)
    assert scaler_state(resumed) == (FRESH_SCALE / 4, 0)  # before the fix: 65536, 0 (and the same skipped steps)


def test_a_checkpoint_without_scaler_state_still_resumes_an_fp16_run(monkeypatch, tmp_path):
    fp32 = trainer(monkeypatch, fp16=False)
    assert fp32.scaler is None
    fp32.step(*rollouts(4))
    fp32.save_checkpoint(tmp_path)
    state = torch.load(tmp_path / TRAINER_STATE_FILE, weights_only=True)
    assert state["grad_scaler"] is None  # a run without a scaler saves none
    del state["grad_scaler"]  # and a checkpoint written before the scaler was saved has no key at all
    torch.save(state, tmp_path / TRAINER_STATE_FILE)

    resumed = trainer(monkeypatch, fp16=True, seed=5)
    resumed.load_checkpoint(tmp_path)
    assert resumed.current_step == 1
    assert scaler_state(resumed) == (FRESH_SCALE, 0)  # a fresh scaler, as before
    stats = resumed.step(*rollouts(4, seed=2))
    assert torch.isfinite(torch.tensor(stats["ppo/loss/total"])) and resumed.current_step == 2


def test_an_fp16_checkpoint_resumed_without_a_scaler_warns_and_loads_the_rest(monkeypatch, tmp_path):
    fp16 = trainer(monkeypatch, fp16=True)
    fp16.step(*rollouts(4))
    fp16.kl_ctl.value = 0.123
    fp16.save_checkpoint(tmp_path)
    resumed = trainer(monkeypatch, fp16=False, seed=5)
    with pytest.warns(UserWarning, match=r"fp16 run \(gradient scale 65536.0\); this run has no fp16 gradient"):
        resumed.load_checkpoint(tmp_path)
    assert resumed.scaler is None and resumed.current_step == 1 and resumed.kl_ctl.value == 0.123
