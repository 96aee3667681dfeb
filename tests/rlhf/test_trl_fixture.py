"""Parity with the real TRL 0.11.4, against a fixture it made (scripts/make_trl_fixture.py; TRL is not needed here).

tests/fixtures/trl_0_11_4/ holds a tiny random Llama saved by TRL's AutoModelForCausalLMWithValueHead (value head
with known values inside model.safetensors, TRL's layout), a second one as PPO's reference, and reference.json:
TRL's logits and values on fixed ids, the stats of one TRL PPOTrainer.step on fixed rollouts, and the logits and
values after that step. Tolerances are float32 round-off across transformers 4.46 -> 5, not loose fits.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from rlhf.value_head import MissingValueHeadWarning, AutoModelForCausalLMWithValueHead

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "trl_0_11_4"
REF = json.loads((FIXTURE / "reference.json").read_text())
IDS = torch.tensor(REF["input_ids"])


def _load(folder: Path) -> AutoModelForCausalLMWithValueHead:
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingValueHeadWarning)  # the head must come from the file
        return AutoModelForCausalLMWithValueHead.from_pretrained(folder).eval()


def _forward(model) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        logits, _, values = model(input_ids=IDS)
    return logits, values


def test_trl_saved_value_head_loads_with_its_weights():
    model = _load(FIXTURE / "policy")
    assert model.v_head.summary.weight.tolist() == REF["v_head"]["weight"]
    assert model.v_head.summary.bias.tolist() == REF["v_head"]["bias"]


@pytest.mark.parametrize("folder,key", [("policy", "before"), ("ref", "ref_before")])
def test_logits_and_values_match_trl(folder, key):
    logits, values = _forward(_load(FIXTURE / folder))
    torch.testing.assert_close(logits, torch.tensor(REF[key]["logits"]), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(values, torch.tensor(REF[key]["values"]), atol=1e-5, rtol=1e-5)


def _trl_step():
    from rlhf.configs import PPOConfig
    from rlhf.ppo import PPOTrainer
    from transformers import AutoTokenizer

    ppo = REF["ppo"]
    policy, reference = _load(FIXTURE / "policy"), _load(FIXTURE / "ref")
    tokenizer = AutoTokenizer.from_pretrained(FIXTURE / "policy")
    config = PPOConfig(**ppo["settings"], advantage_estimator="gae", bf16=False, keep_freed_memory=False)
    trainer = PPOTrainer(config, policy.train(), reference, tokenizer)
    stats = trainer.step([torch.tensor(q) for q in ppo["queries"]], [torch.tensor(r) for r in ppo["responses"]],
                         [torch.tensor(s) for s in ppo["scores"]])
    return trainer, stats


def test_one_ppo_step_matches_trl():
    """Same weights, rollouts and settings as TRL's step: the same stats and the same updated policy."""
    trainer, stats = _trl_step()
    # TRL logs these two as whole per-token tensors (for histograms); our step() returns floats only.
    expected = {k: v for k, v in REF["ppo"]["stats"].items()
                if k not in ("objective/logprobs", "objective/ref_logprobs")}
    assert len(expected) == 20
    mismatched = {k: (stats.get(k), v) for k, v in expected.items()
                  if stats.get(k) is None or abs(stats[k] - v) > 1e-4 + 1e-4 * abs(v)}
    assert not mismatched, mismatched
    logits, values = _forward(trainer.unwrapped_model.eval())
    torch.testing.assert_close(logits, torch.tensor(REF["after"]["logits"]), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(values, torch.tensor(REF["after"]["values"]), atol=1e-4, rtol=1e-4)
    # The step moved the policy (the comparison above is not before == before).
    assert not torch.allclose(logits, torch.tensor(REF["before"]["logits"]), atol=1e-3)


def test_our_save_is_trl_layout_and_plain_model_loads(tmp_path):
    """What we save holds the head where TRL 0.11's from_pretrained looks (v_head.summary.* in model.safetensors,
    the fixture's own key set), and still loads as a plain causal LM."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    _load(FIXTURE / "policy").save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as ours, \
            safe_open(str(FIXTURE / "policy" / "model.safetensors"), framework="pt") as trl:
        assert set(ours.keys()) == set(trl.keys())
        for name in trl.keys():
            assert torch.equal(ours.get_tensor(name), trl.get_tensor(name)), name
    plain = AutoModelForCausalLM.from_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=IDS).logits, torch.tensor(REF["before"]["logits"]),
                                   atol=1e-5, rtol=1e-5)
