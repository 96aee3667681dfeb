"""The speed and memory settings every trainer applies to its model are defined once (rlhf/configs.py) and shared
by PPOConfig and the Trainer-based configs' base (rlhf/trainer_config.py): same help, same check."""
import dataclasses

import pytest

from rlhf.configs import PPOConfig

SHARED = ("keep_freed_memory", "attn_implementation", "share_input_casts")


def _fields(cls) -> dict:
    return {f.name: f for f in dataclasses.fields(cls)}


def test_every_trainer_config_has_the_one_definition_of_the_shared_settings():
    from rlhf.dpo import DPOConfig
    from rlhf.grpo import GRPOConfig
    from rlhf.kto import KTOConfig
    from rlhf.reward import RewardConfig
    from rlhf.rloo import RLOOConfig
    from rlhf.sft import SFTConfig
    from rlhf.trainer_config import TrainerConfig

    base = _fields(TrainerConfig)
    for cls in (SFTConfig, RewardConfig, DPOConfig, GRPOConfig, RLOOConfig, KTOConfig):
        for name in SHARED:
            assert _fields(cls)[name].metadata == base[name].metadata, (cls.__name__, name)
            assert _fields(cls)[name].default == base[name].default, (cls.__name__, name)
    ppo = _fields(PPOConfig)
    for name in ("keep_freed_memory", "attn_implementation"):  # PPO applies no shared input casts
        assert ppo[name].metadata["help"] == base[name].metadata["help"]
    # defaults differ where the trainers do: PPO generates too, where the model's own kernel is faster
    assert (ppo["attn_implementation"].default, base["attn_implementation"].default) == ("model", "auto")


def test_a_bad_attention_kernel_is_refused_the_same_way_by_both():
    from rlhf.dpo import DPOConfig

    message = "attn_implementation='flash': must be one of auto, lean_eager, eager, sdpa, flash_attention_2, model"
    with pytest.raises(ValueError) as ppo_error:
        PPOConfig(attn_implementation="flash")
    with pytest.raises(ValueError) as trainer_error:
        DPOConfig(output_dir="unused", report_to="none", attn_implementation="flash")
    assert str(ppo_error.value) == str(trainer_error.value) == message
