"""Gradient (activation) checkpointing for PPO (policy and value head) and GRPO/RLOO: the same gradients, and less
memory held for the backward pass (measured as the bytes autograd saves during the forward)."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.configs import PPOConfig
from rlhf.ppo import PPOTrainer
from rlhf.value_head import AutoModelForCausalLMWithValueHead
from tests.rlhf.test_ppo import SMALL_TOKENIZER, rollouts


def saved_bytes_and_grads(model, loss_fn):
    """(bytes autograd kept for backward during the forward, {name: grad}) of loss_fn(model)."""
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model)
    loss.backward()
    return total, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def four_layer_value_model() -> AutoModelForCausalLMWithValueHead:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=16, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=0, pad_token_id=0)
    return AutoModelForCausalLMWithValueHead(LlamaForCausalLM(config), seed=0)


def test_ppo_checkpoints_the_policy_and_value_head_with_the_same_gradients():
    queries, responses, scores = rollouts(8)
    grads, saved = {}, {}
    for on in (False, True):
        config = PPOConfig(batch_size=8, mini_batch_size=8, ppo_epochs=1, advantage_estimator="gae", bf16=False,
                           gradient_checkpointing=on)
        trainer = PPOTrainer(config, four_layer_value_model(), None, SMALL_TOKENIZER)
        assert trainer.model.pretrained_model.is_activation_checkpointing == on
        layout = trainer._layout(queries, responses, None)
        trainer.model.train()

        def loss(model):  # PPO's training forward: log-probs from the policy, values from the head
            logprobs, values, _ = trainer._forward(model, layout)
            return -(logprobs * layout.mask).sum() + (values * layout.mask).pow(2).sum()

        saved[on], grads[on] = saved_bytes_and_grads(trainer.model, loss)
    assert grads[True].keys() == grads[False].keys() and "v_head.summary.weight" in grads[True]
    for name, grad in grads[False].items():
        torch.testing.assert_close(grads[True][name], grad, atol=1e-6, rtol=1e-5)
    assert saved[True] < 0.5 * saved[False], saved


def test_grpo_forward_under_checkpointing_gives_the_same_gradients_with_less_kept(tiny_model_dir, tmp_path):
    from datasets import Dataset

    from rlhf import GRPOConfig, GRPOTrainer
    from rlhf.trainer_setup import enable_gradient_checkpointing
    from tests.rlhf.test_grpo import reward_len, small_args

    trainer = GRPOTrainer(str(tiny_model_dir), reward_funcs=reward_len, train_dataset=Dataset.from_dict({"prompt": ["a"]}),
                          args=small_args(GRPOConfig, tmp_path, gradient_checkpointing=True))
    g = torch.Generator().manual_seed(0)
    batch = {"prompt_ids": torch.randint(5, 500, (4, 24), generator=g), "prompt_mask": torch.ones(4, 24, dtype=torch.long),
             "completion_ids": torch.randint(5, 500, (4, 16), generator=g), "completion_mask": torch.ones(4, 16, dtype=torch.long)}
    model = trainer.model.train()

    def loss(m):
        return trainer._token_logps(m, batch)[0].sum()

    saved_plain, grads_plain = saved_bytes_and_grads(model, loss)
    enable_gradient_checkpointing(model)  # what Trainer.train() does with gradient_checkpointing=True
    saved_ckpt, grads_ckpt = saved_bytes_and_grads(model, loss)
    for name, grad in grads_plain.items():
        torch.testing.assert_close(grads_ckpt[name], grad, atol=1e-6, rtol=1e-5)
    assert saved_ckpt < saved_plain, (saved_ckpt, saved_plain)
    trainer.train()  # and training with it on runs (generation in eval mode keeps its KV cache)
    assert base_checkpointing(trainer.model)


def base_checkpointing(model) -> bool:
    from rlhf.peft_utils import base_model

    return bool(base_model(model).is_activation_checkpointing)
