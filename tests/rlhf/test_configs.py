"""rlhf/configs.py: help on every field, errors naming field and value, TRL's aliases and derived sizes."""
import dataclasses
import warnings

import pytest

from rlhf.configs import GenerationSettings, PPOConfig


@pytest.mark.parametrize("cls", [GenerationSettings, PPOConfig])
def test_every_field_has_help(cls):
    assert all(f.metadata.get("help") for f in dataclasses.fields(cls))


def test_generation_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GenerationSettings().seed = 1


def test_ppo_config_is_mutable_as_trls_and_checked_on_assignment():
    config = PPOConfig()
    config.batch_size = 8  # TRL users' habit; mini_batch_size followed batch_size (None given), so it follows again
    assert (config.batch_size, config.mini_batch_size, config.backward_batch_size) == (8, 8, 8)
    config.mini_batch_size, config.gradient_accumulation_steps = 4, 2
    assert config.backward_batch_size == 8  # derived again
    config.batch_size = 16
    assert config.mini_batch_size == 4  # set by hand: kept
    with pytest.raises(ValueError, match=r"^gamma=1.5: must be in \[0, 1\]$"):
        config.gamma = 1.5
    assert config.gamma == 1.0  # a refused value leaves the config as it was
    with pytest.raises(ValueError, match="batch_size=12: must be a multiple"):
        config.batch_size = 12
    assert config.batch_size == 16
    with pytest.raises(AttributeError, match="PPOConfig has no field 'batchsize'"):
        config.batchsize = 8
    with pytest.warns(UserWarning, match="optimize_device_cache does not apply"):
        config.optimize_device_cache = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config.seed = 3  # the optimize_device_cache warning is not repeated for another field
    assert config == dataclasses.replace(config) and config.seed == 3
    # TRL's runtime field is accepted and, as in TRL, replaced by the derived value
    assert PPOConfig(batch_size=8, mini_batch_size=2, gradient_accumulation_steps=2, backward_batch_size=99).backward_batch_size == 4


@pytest.mark.parametrize("cls, change, message", [
    (GenerationSettings, {"max_new_tokens": 0}, "max_new_tokens=0: must be between 1 and 32,768"),
    (GenerationSettings, {"max_new_tokens": 10**12}, "max_new_tokens=1000000000000: must be between 1 and 32,768"),
    (GenerationSettings, {"temperature": 0.0}, "temperature=0.0: must be positive"),
    (GenerationSettings, {"top_p": 1.5}, "top_p=1.5: must be in (0, 1]"),
    (PPOConfig, {"gamma": 1.5}, "gamma=1.5: must be in [0, 1]"),
    (PPOConfig, {"kl_penalty": "l2"}, "kl_penalty='l2': must be kl, abs, mse or full"),
    (PPOConfig, {"use_score_norm": True}, "use_score_norm=True: only applies together with use_score_scaling=True"),
    # 8 rollouts per optimizer step (4 x 2) do not divide a batch of 12
    (PPOConfig, {"batch_size": 12, "mini_batch_size": 4, "gradient_accumulation_steps": 2},
     "batch_size=12: must be a multiple of mini_batch_size * gradient_accumulation_steps = 8"),
])
def test_errors_name_the_field_and_the_value(cls, change, message):
    with pytest.raises(ValueError) as error:
        cls(**change)
    assert str(error.value) == message


def test_ppo_derived_sizes_and_trl_aliases():
    config = PPOConfig(batch_size=32, mini_batch_size=4, gradient_accumulation_steps=2, ppo_epochs=3)
    assert config.backward_batch_size == 8  # 4 x 2 rollouts per optimizer step
    assert config.optimizer_steps_per_batch == 12  # 3 epochs x 32 / 8
    assert PPOConfig(batch_size=8).mini_batch_size == 8 and PPOConfig(batch_size=64).mini_batch_size == 16  # min(bs, 16)
    with pytest.warns(FutureWarning, match="forward_batch_size is deprecated"):
        aliased = PPOConfig(batch_size=8, forward_batch_size=2)
    assert (aliased.mini_batch_size, aliased.forward_batch_size) == (2, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # cleared alias: replace() does not warn or override again
        assert dataclasses.replace(aliased, mini_batch_size=4).mini_batch_size == 4


def test_ppo_rollout_rule_each_process_generates_whole_answer_groups():
    # batch 64 in groups of 4 answers: 16 prompts a batch; batch 8 of 8 answers: 1 prompt
    assert PPOConfig(batch_size=64).prompts_per_batch(4) == 16
    assert PPOConfig(batch_size=8).prompts_per_batch(8) == 1
    with pytest.raises(ValueError) as error:
        PPOConfig(batch_size=6, mini_batch_size=2).prompts_per_batch(4)  # 1.5 prompts: a group split
    assert str(error.value) == ("answers_per_prompt=4: must divide batch_size=6 (each process generates whole groups "
                                "of answers to a prompt in its batch)")
    with pytest.raises(ValueError, match="^answers_per_prompt=0: must be at least 1$"):
        PPOConfig(batch_size=8).prompts_per_batch(0)


def test_generation_kl_safe_only_for_full_distribution_sampling():
    assert GenerationSettings().kl_safe
    for change in ({"top_k": 50}, {"top_p": 0.9}, {"temperature": 0.7}, {"do_sample": False}, {"min_length": 5}):
        assert not GenerationSettings(**change).kl_safe, change
