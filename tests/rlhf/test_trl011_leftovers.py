"""TRL 0.11 arguments that used to raise TypeError: num_shared_layers, training_data_collator,
create_reference_model(num_shared_layers=, pattern=)."""
from __future__ import annotations

import types

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.configs import PPOConfig
from rlhf.ppo import PPOTrainer
from rlhf.value_head import AutoModelForCausalLMWithValueHead, create_reference_model, shared_parameter_names

from param_checks import snapshot

EOS = 0
TOKENIZER = types.SimpleNamespace(pad_token_id=EOS, eos_token_id=EOS, save_pretrained=lambda d: None)


def model(layers: int = 3) -> AutoModelForCausalLMWithValueHead:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)
    return AutoModelForCausalLMWithValueHead(LlamaForCausalLM(config))


def rollouts(n: int):
    g = torch.Generator().manual_seed(0)
    queries = [torch.randint(1, 16, (3,), generator=g) for _ in range(n)]
    responses = [torch.randint(1, 16, (4,), generator=g) for _ in range(n)]
    return queries, responses, [torch.randn((), generator=g) for _ in range(n)]


def test_shared_parameter_names_follow_trls_layer_patterns():
    m = model(layers=3)
    names = shared_parameter_names(m, 2)
    assert names[0] == "pretrained_model.model.embed_tokens.weight"
    assert names[-1].startswith("pretrained_model.model.layers.1.") and not any(".layers.2." in n for n in names)
    assert shared_parameter_names(m, 1, pattern="model.layers.{layer}") == shared_parameter_names(m, 1)
    with pytest.raises(ValueError, match="num_shared_layers=5: no parameter matches"):
        shared_parameter_names(m, 5)
    with pytest.raises(ValueError, match="no parameter matches transformer.h.1"):
        shared_parameter_names(m, 1, pattern="transformer.h.{layer}")


def test_create_reference_model_freezes_the_shared_layers_of_the_policy():
    m = model(layers=3)
    ref = create_reference_model(m, num_shared_layers=1)
    frozen = {n for n, p in m.named_parameters() if not p.requires_grad}
    assert frozen == set(shared_parameter_names(m, 1))  # embeddings and layer 0
    assert not any(p.requires_grad for p in ref.parameters()) and not ref.training
    untouched = model()
    create_reference_model(untouched)  # no shared layers: the policy keeps every parameter trainable
    assert all(p.requires_grad for p in untouched.parameters())


def test_ppo_trainer_num_shared_layers_trains_only_the_later_layers():
    m = model(layers=3)
    config = PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-2, advantage_estimator="gae", bf16=False)
    trainer = PPOTrainer(config, m, None, TOKENIZER, num_shared_layers=2)
    before, ref_before = snapshot(trainer.model), snapshot(trainer.ref_model)
    trainer.step(*rollouts(4))
    after = snapshot(trainer.model)
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved, "nothing trained"
    assert not any(n.startswith(("pretrained_model.model.embed_tokens", "pretrained_model.model.layers.0.",
                                 "pretrained_model.model.layers.1.")) for n in moved)
    assert any(n.startswith("pretrained_model.model.layers.2.") for n in moved)
    assert all(torch.equal(ref_before[n], p) for n, p in snapshot(trainer.ref_model).items())


def test_ppo_trainer_warns_on_what_it_ignores():
    ref = create_reference_model(model())
    with pytest.warns(UserWarning, match="num_shared_layers is ignored when ref_model is given"):
        PPOTrainer(PPOConfig(batch_size=2, bf16=False), model(), ref, TOKENIZER, num_shared_layers=1)
    with pytest.warns(UserWarning, match="training_data_collator is ignored: TRL pads query\\+response"):
        trainer = PPOTrainer(PPOConfig(batch_size=2, bf16=False), model(), None, TOKENIZER,
                             training_data_collator=lambda rows: rows)
    assert torch.isfinite(torch.tensor(trainer.step(*rollouts(2))["ppo/loss/total"]))  # the step runs without it


def test_an_unsharded_policy_is_saved_from_its_own_parameters():
    from accelerate import Accelerator

    from rlhf.distributed import full_state_dict, is_sharded, sharded_by_caller

    m = model()
    accelerator = Accelerator()
    assert not sharded_by_caller(m) and not is_sharded(accelerator, m)
    assert full_state_dict(accelerator, m) is None  # no gather: save_pretrained reads the module as it is
    trainer = PPOTrainer(PPOConfig(batch_size=2, bf16=False), m, None, TOKENIZER, accelerator=accelerator)
    assert trainer.gathered_state_dict() is None and trainer.model is m  # one process: prepared, not wrapped
