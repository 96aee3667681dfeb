"""rlhf/autocast_inputs.py: a block's input cast once under autocast, shared by its projections."""
import pytest
import torch
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

from rlhf.autocast_inputs import reads_its_input_several_times, share_input_casts


def tiny(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "bert":
        return BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=64))


def bf16_copies_kept(model: torch.nn.Module, ids: torch.Tensor) -> tuple[int, int, torch.Tensor, list[torch.Tensor]]:
    """(bf16 tensors the backward keeps, distinct storages among them, output, parameter gradients)."""
    kept = []

    def pack(tensor):
        if tensor.dtype == torch.bfloat16:
            kept.append(tensor)
        return tensor

    model.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            output = model(input_ids=ids)
            output = output.logits if hasattr(output, "logits") else output.last_hidden_state
    output.float().pow(2).mean().backward()
    storages = {tensor.untyped_storage().data_ptr() for tensor in kept}
    return len(kept), len(storages), output.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("name, blocks", [("bert", 2), ("llama", 4)])  # Llama: attention and MLP per layer
def test_projections_share_one_cast_with_the_same_outputs(name, blocks):
    model = tiny(name)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    _, storages_before, output_before, grads_before = bf16_copies_kept(model, ids)
    assert share_input_casts(model) == blocks
    assert share_input_casts(model) == blocks  # a second call adds no second hook
    _, storages_after, output_after, grads_after = bf16_copies_kept(model, ids)
    # BERT: q, k, v read one copy (2 fewer per layer); Llama: also gate and up (3 fewer per layer).
    assert storages_before - storages_after == {"bert": 2, "llama": 3}[name] * 2
    assert torch.equal(output_after, output_before)  # autocast made the very same bf16 copies
    # The input gradients now add up in bf16 before the cast back: one more bf16 rounding there.
    for after, before in zip(grads_after, grads_before):
        torch.testing.assert_close(after, before, rtol=0.02, atol=1e-3)


def test_the_hook_leaves_fp32_runs_and_lora_projections_alone():
    model = tiny("bert")
    share_input_casts(model)
    ids = torch.tensor([[3, 4, 5, 6]])
    assert model(input_ids=ids).last_hidden_state.dtype == torch.float32  # no autocast: nothing is cast
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(tiny("bert"), LoraConfig(r=2, target_modules=["query", "value"]))
    attention = lora.base_model.model.encoder.layer[0].attention.self
    assert not reads_its_input_several_times(attention)
