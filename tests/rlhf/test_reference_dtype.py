"""The frozen reference kept in the compute dtype (bf16 where the run computes in bf16), and the no-grad passes
keeping no more than they need: no KV cache, only the last hidden state, no value head on the reference's pass."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.configs import PPOConfig
from rlhf.core import logprobs_from_logits
from rlhf.ppo import PPOTrainer
from rlhf.precision import copy_in_dtype, reference_dtype
from rlhf.value_head import AutoModelForCausalLMWithValueHead, create_reference_model
from tests.rlhf.test_ppo import SMALL_TOKENIZER, rollouts, small_vocab_model


def llama(vocab: int = 512, seed: int = 0) -> AutoModelForCausalLMWithValueHead:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=True, eos_token_id=0, pad_token_id=0)
    return AutoModelForCausalLMWithValueHead(LlamaForCausalLM(config), seed=seed)


def test_reference_dtype_is_bf16_only_for_a_bf16_run():
    assert reference_dtype(torch.bfloat16) == torch.bfloat16
    # fp16 keeps the policy's dtype: its range overflows a residual stream autocast keeps in fp32
    assert reference_dtype(torch.float16) is None and reference_dtype(None) is None


def test_copy_in_dtype_casts_the_backbone_keeps_ties_and_leaves_the_policy_alone():
    model = llama()
    ref = create_reference_model(model, dtype=torch.bfloat16)
    # The matmul weights in bf16 (autocast would cast them on every forward); embeddings, the head tied to them and
    # the norms in fp32, as autocast runs them: the copy computes exactly what the policy does.
    layer = ref.pretrained_model.model.layers[0]
    assert layer.self_attn.q_proj.weight.dtype == layer.mlp.down_proj.weight.dtype == torch.bfloat16
    assert layer.input_layernorm.weight.dtype == torch.float32
    assert ref.v_head.summary.weight.dtype == torch.float32  # the head is not the backbone (and is never run)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    lm_head, embed = ref.pretrained_model.lm_head.weight, ref.pretrained_model.model.embed_tokens.weight
    assert lm_head is embed and embed.dtype == torch.float32  # a tied weight is copied once, as the embedding
    assert all(not p.requires_grad for p in ref.parameters()) and not ref.training
    assert torch.equal(layer.self_attn.q_proj.weight,
                       model.pretrained_model.model.layers[0].self_attn.q_proj.weight.detach().to(torch.bfloat16))
    # the rotary frequencies (a buffer) stay fp32
    assert ref.pretrained_model.model.rotary_emb.inv_freq.dtype == torch.float32
    # None: a plain deep copy
    assert {p.dtype for p in copy_in_dtype(model, None).parameters()} == {torch.float32}


def test_bf16_reference_log_probs_equal_the_fp32_copys_under_autocast():
    """Under bf16 autocast both compute their matmuls on the same bf16 weights, and the residual stream, the
    embeddings and the norms in fp32: the same log-probs."""
    model = llama()
    fp32_ref = create_reference_model(model)
    bf16_ref = create_reference_model(model, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 512, (4, 48), generator=g)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits32 = fp32_ref(input_ids=ids, with_values=False)[0]
        logits16 = bf16_ref(input_ids=ids, with_values=False)[0]
    lp32 = logprobs_from_logits(logits32[:, :-1], ids[:, 1:])
    lp16 = logprobs_from_logits(logits16[:, :-1], ids[:, 1:])
    assert torch.allclose(lp16, lp32, atol=1e-6), (lp16 - lp32).abs().max()
    assert bf16_ref.pretrained_model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16  # really a bf16 copy


@pytest.mark.parametrize("bf16, expected", [(True, torch.bfloat16), (False, torch.float32)])
def test_ppo_keeps_its_copied_reference_in_the_compute_dtype(bf16, expected):
    trainer = PPOTrainer(PPOConfig(batch_size=4, mini_batch_size=2, bf16=bf16, learning_rate=1e-2),
                         small_vocab_model(), None, SMALL_TOKENIZER)
    assert trainer.ref_model.pretrained_model.model.layers[0].mlp.up_proj.weight.dtype == expected
    assert {p.dtype for p in trainer.model.pretrained_model.parameters()} == {torch.float32}  # fp32 master weights
    before = {n: p.detach().clone() for n, p in trainer.ref_model.named_parameters()}
    stats = trainer.step(*rollouts(4))
    assert stats["objective/kl"] == pytest.approx(0.0, abs=1e-4)  # policy == reference at step one
    assert all(torch.equal(before[n], p) for n, p in trainer.ref_model.named_parameters())


def test_no_grad_passes_keep_no_cache_and_no_hidden_states_and_the_reference_runs_no_value_head():
    trainer = PPOTrainer(PPOConfig(batch_size=4, mini_batch_size=2, bf16=False), small_vocab_model(), None,
                         SMALL_TOKENIZER)
    calls = {"policy": [], "reference": [], "policy_head": 0, "reference_head": 0}

    def record(name):
        return lambda module, args, kwargs: calls[name].append(kwargs)

    trainer.model.pretrained_model.register_forward_pre_hook(record("policy"), with_kwargs=True)
    trainer.ref_model.pretrained_model.register_forward_pre_hook(record("reference"), with_kwargs=True)
    trainer.model.v_head.register_forward_hook(lambda *a: calls.__setitem__("policy_head", calls["policy_head"] + 1))
    trainer.ref_model.v_head.register_forward_hook(
        lambda *a: calls.__setitem__("reference_head", calls["reference_head"] + 1))
    trainer.step(*rollouts(4))
    for kwargs in calls["policy"] + calls["reference"]:
        assert kwargs["use_cache"] is False and not kwargs.get("output_hidden_states")
    assert len(calls["reference"]) >= 1 and len(calls["policy"]) > len(calls["reference"])  # + training passes
    assert calls["reference_head"] == 0 and calls["policy_head"] > 0


def test_values_from_the_lm_heads_input_equal_the_last_of_all_hidden_states():
    model = llama().eval()
    ids = torch.randint(1, 512, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, _, values = model(input_ids=ids, logits_to_keep=7)
        every = model.pretrained_model(input_ids=ids, output_hidden_states=True, use_cache=False)
    assert values.shape == (2, 7) and logits.shape == (2, 7, 512)
    assert torch.allclose(values, model.v_head(every.hidden_states[-1][:, -7:]), atol=1e-6)
    with torch.no_grad():
        all_values = model(input_ids=ids)[2]
    assert torch.allclose(all_values, model.v_head(every.hidden_states[-1]), atol=1e-6)


@pytest.mark.parametrize("bf16, expected", [(True, torch.bfloat16), (False, torch.float32)])
def test_grpo_keeps_its_copied_reference_in_the_compute_dtype(tiny_model_dir, tmp_path, bf16, expected):
    from datasets import Dataset

    from rlhf import GRPOConfig, GRPOTrainer
    from tests.rlhf.test_grpo import reward_len, small_args

    rows = Dataset.from_dict({"prompt": [f"Review {i}:" for i in range(8)]})
    trainer = GRPOTrainer(str(tiny_model_dir), reward_funcs=reward_len, train_dataset=rows,
                          args=small_args(GRPOConfig, tmp_path, beta=0.1, bf16=bf16, max_steps=1))
    assert trainer.ref_model.model.layers[0].mlp.up_proj.weight.dtype == expected
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    before = {n: p.detach().clone() for n, p in trainer.ref_model.named_parameters()}
    trainer.train()
    assert all(torch.equal(before[n], p) for n, p in trainer.ref_model.named_parameters())


def test_dpo_and_kto_keep_their_reference_in_bf16_matmuls_and_step_one_is_unchanged(tiny_model_dir, tmp_path):
    """The label trainers' frozen copy (and one loaded by name) in a bf16 run: bf16 Linear weights, fp32 embeddings
    and norms, so under autocast it computes the policy's own log-probs: DPO's first loss is log 2 exactly."""
    import math

    from rlhf import DPOTrainer, KTOConfig, KTOTrainer
    from tests.rlhf.test_dpo import config, toy_pairs
    from tests.rlhf.test_kto import kto_rows

    def kinds(model):
        layer = model.model.layers[0]
        return layer.mlp.up_proj.weight.dtype, model.model.embed_tokens.weight.dtype, layer.input_layernorm.weight.dtype

    dpo = DPOTrainer(str(tiny_model_dir), args=config(tmp_path, max_steps=1, bf16=True, learning_rate=1e-9,
                                                      logging_steps=1, precompute_ref_log_probs=False),
                     train_dataset=toy_pairs(8, seed=0))
    assert kinds(dpo.ref_model) == (torch.bfloat16, torch.float32, torch.float32)
    assert {p.dtype for p in dpo.model.parameters()} == {torch.float32}  # fp32 master weights
    dpo.train()
    first = next(log for log in dpo.state.log_history if "loss" in log)
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-4)  # policy == reference at step one
    fp32 = DPOTrainer(str(tiny_model_dir), args=config(tmp_path / "fp32", max_steps=1, bf16=False,
                                                                    precompute_ref_log_probs=False),
                      train_dataset=toy_pairs(8, seed=0))
    assert kinds(fp32.ref_model)[0] == torch.float32  # an fp32 run keeps an fp32 reference
    by_name = DPOTrainer(str(tiny_model_dir), ref_model=str(tiny_model_dir),
                         args=config(tmp_path / "named", max_steps=1, bf16=True, precompute_ref_log_probs=False), train_dataset=toy_pairs(8, seed=0))
    assert kinds(by_name.ref_model) == (torch.bfloat16, torch.float32, torch.float32)
    kto = KTOTrainer(str(tiny_model_dir), args=KTOConfig(output_dir=str(tmp_path / "kto"), per_device_train_batch_size=4,
                                                         max_steps=1, report_to="none", save_strategy="no", bf16=True),
                     train_dataset=kto_rows())
    assert kinds(kto.ref_model) == (torch.bfloat16, torch.float32, torch.float32)
