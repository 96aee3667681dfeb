"""A policy run that scores with reward models holds them beside the policy: the preview's memory counts them (the
app-loop check at the random 1.5B shape measured PPO reward=rm at 15.0 GiB against an estimate of 6.7 GiB that left
its 5.75 GiB reward model out)."""
from __future__ import annotations

import json

import pytest

from labeler.services.serving import inference, models
from labeler.services.training import run_estimate
from labeler.services.settings.job_settings import JobConfig


def fake_reward_model(folder, megabytes: int, dtype: str):
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0" * (megabytes * 2**20))
    (folder / "config.json").write_text(json.dumps({"dtype": dtype}))
    return str(folder)


@pytest.fixture
def on_an_avx2_cpu(monkeypatch):
    monkeypatch.setattr(inference, "host_device", lambda: "cpu")
    monkeypatch.setattr(inference, "cpu_flags", lambda: frozenset({"avx2"}))


def test_the_reward_models_a_policy_run_scores_with_are_counted(db, tmp_path, on_an_avx2_cpu):
    models.register_model(db, "rm-old", fake_reward_model(tmp_path / "old", 1, "float32"), "reward")
    models.register_model(db, "safe", fake_reward_model(tmp_path / "safe", 2, "float32"), "reward")
    models.register_model(db, "helpful", fake_reward_model(tmp_path / "helpful", 3, "bfloat16"), "reward")
    mib = 2**20
    # the newest (a bf16 file of 3 MiB, scored in fp32 on a CPU without bf16: 6 MiB)
    assert run_estimate.reward_model_bytes(db, "ppo", JobConfig(reward="rm")) == 6 * mib
    assert run_estimate.reward_model_bytes(db, "ppo", JobConfig(reward="rm", reward_model="rm-old")) == 1 * mib
    both = JobConfig(reward="rm", reward_model="rm:helpful*0.7+rm:safe*0.3")
    assert run_estimate.reward_model_bytes(db, "ppo", both) == (6 + 2) * mib
    assert run_estimate.reward_model_bytes(db, "grpo", JobConfig(reward="mix", reward_model="safe")) == 2 * mib
    # no reward model held: people, a function, a label stage
    assert run_estimate.reward_model_bytes(db, "ppo", JobConfig(reward="human")) == 0
    assert run_estimate.reward_model_bytes(db, "ppo", JobConfig(reward="function", reward_function="vader")) == 0
    assert run_estimate.reward_model_bytes(db, "dpo", JobConfig(reward="rm")) == 0


def test_no_reward_model_yet_counts_nothing(db):
    assert run_estimate.reward_model_bytes(db, "ppo", JobConfig(reward="rm")) == 0


def test_the_estimate_adds_them_and_names_them():
    from rlhf.memory_estimate import GIB, MemoryEstimate

    estimate = MemoryEstimate(weights=4 * GIB, gradients=0, optimizer=0, reference=0, activations=1 * GIB,
                              reward_models=2 * GIB)
    assert estimate.total == 7 * GIB
    assert estimate.summary() == "7.0 GiB (weights 4.00, activations and logits 1.00, reward models 2.00)"


def test_an_adapter_reward_model_counts_its_base(db, tmp_path, on_an_avx2_cpu):
    """`train rm --set lora=true` saves an adapter folder: 37 MB on disk for a 1.5B base scored at 5.75 GiB."""
    base = fake_reward_model(tmp_path / "base", 4, "bfloat16")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"\0" * 2**20)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    models.register_model(db, "lora-rm", str(adapter), "reward")
    assert run_estimate.reward_model_bytes(db, "ppo", JobConfig(reward="rm")) == (1 + 2 * 4) * 2**20
    assert inference.estimated_bytes(str(adapter), "cuda") == (1 + 4) * 2**20  # the checkpoint's own dtype on a GPU
