"""accelerate keeps one mixed-precision state per process. A notebook that ran an HF Trainer with bf16=True and then
builds a PPOTrainer with bf16=False got its forward passes in bf16 anyway: prepare() wrapped model.forward in the
inherited autocast. The trainer now keeps to its config (and warns); a process launched with
`accelerate launch --mixed_precision bf16` still gets accelerate's precision, as before."""
import warnings

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from rlhf.configs import PPOConfig
from rlhf.ppo import PPOTrainer
from rlhf.precision import InheritedMixedPrecisionWarning, inherited_mixed_precision
from tests.rlhf.test_ppo import SMALL_TOKENIZER, rollouts, small_vocab_model

CONFIG = PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=1, bf16=False)


@pytest.fixture
def bf16_state_left_behind(monkeypatch):
    """The state an HF Trainer with bf16=True leaves in the process (it builds Accelerator(mixed_precision=bf16))."""
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    AcceleratorState._reset_state(True)
    Accelerator(mixed_precision="bf16")
    yield
    AcceleratorState._reset_state(True)


def lm_head_dtype(trainer: PPOTrainer) -> torch.dtype:
    """The dtype the LM head computes in during the trainer's own forward pass."""
    seen = []
    head = trainer.unwrapped_model.pretrained_model.lm_head
    handle = head.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    try:
        with trainer._autocast():
            trainer.model(input_ids=torch.tensor([[1, 2, 3]]))
    finally:
        handle.remove()
    return seen[0]


def test_an_fp32_ppo_run_stays_fp32_after_a_bf16_trainer_in_the_same_process(bf16_state_left_behind):
    with pytest.warns(InheritedMixedPrecisionWarning, match="mixed_precision=bf16 from an earlier trainer; this one computes in no"):
        trainer = PPOTrainer(CONFIG, small_vocab_model(), small_vocab_model(), SMALL_TOKENIZER)
    assert lm_head_dtype(trainer) == torch.float32  # before the fix: bfloat16
    stats = trainer.step(*rollouts(2))
    assert torch.isfinite(torch.tensor(stats["ppo/loss/total"]))


def test_the_copied_reference_also_stays_fp32_after_a_bf16_trainer(bf16_state_left_behind):
    """The reference is prepared too (accelerate wraps its forward in the inherited autocast): left so, it alone ran
    in bf16 and the first step's KL was bf16's rounding, not 0 (CI: -0.00024 on the small model)."""
    with pytest.warns(InheritedMixedPrecisionWarning):
        trainer = PPOTrainer(CONFIG, small_vocab_model(), None, SMALL_TOKENIZER)
    seen = []
    head = trainer.ref_model.pretrained_model.lm_head
    handle = head.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    stats = trainer.step(*rollouts(2))
    handle.remove()
    assert seen and set(seen) == {torch.float32}
    assert stats["objective/kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference at step one


def test_a_bf16_ppo_run_in_the_same_process_still_computes_in_bf16(bf16_state_left_behind):
    config = PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=1, bf16=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InheritedMixedPrecisionWarning)  # the same precision: nothing to warn of
        trainer = PPOTrainer(config, small_vocab_model(), small_vocab_model(), SMALL_TOKENIZER)
    assert trainer.inherited_precision == "bf16" and lm_head_dtype(trainer) == torch.bfloat16


def test_a_launch_with_mixed_precision_keeps_accelerate_s_precision(monkeypatch):
    """`accelerate launch --mixed_precision bf16` sets ACCELERATE_MIXED_PRECISION: that precision is the user's."""
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    AcceleratorState._reset_state(True)
    try:
        accelerator = Accelerator()
        assert accelerator.mixed_precision == "bf16" and inherited_mixed_precision(accelerator) is None
        trainer = PPOTrainer(CONFIG, small_vocab_model(), small_vocab_model(), SMALL_TOKENIZER)
        assert trainer.inherited_precision is None
        assert lm_head_dtype(trainer) == torch.bfloat16  # accelerate's autocast, as launched
    finally:
        AcceleratorState._reset_state(True)


def test_no_mixed_precision_nothing_inherited():
    AcceleratorState._reset_state(True)
    try:
        trainer = PPOTrainer(CONFIG, small_vocab_model(), small_vocab_model(), SMALL_TOKENIZER)
        assert trainer.inherited_precision is None and lm_head_dtype(trainer) == torch.float32
    finally:
        AcceleratorState._reset_state(True)
