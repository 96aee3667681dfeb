"""rlhf/reference_logps.py: which model gives the reference log-probs (DPO, KTO), and one pass of it over a
dataset whose results become columns."""
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.reference_logps import reference_model, with_reference_columns


def test_reference_columns_come_from_one_pass_in_order():
    from datasets import Dataset

    dataset = Dataset.from_list([{"x": i} for i in range(5)])
    seen = []

    def reference(batch):
        seen.append(batch["x"].tolist())
        return {"double": batch["x"] * 2.0, "plus_one": batch["x"] + 1.0}

    out = with_reference_columns(dataset, lambda rows: {"x": torch.tensor([r["x"] for r in rows])}, 2, "cpu", reference)
    assert seen == [[0, 1], [2, 3], [4]]  # batches of 2 in order, the last one short
    assert out.column_names == ["x", "double", "plus_one"]
    assert (out["double"], out["plus_one"]) == ([0.0, 2.0, 4.0, 6.0, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0])


@pytest.fixture
def accelerator():
    from accelerate import Accelerator

    return Accelerator()


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=64, attention_dropout=0.5))


def test_the_reference_is_the_copy_given_or_the_policy_in_eval_mode(accelerator):
    policy, copy = tiny_llama().train(), tiny_llama()
    with reference_model(copy, policy, accelerator) as reference:
        assert reference is copy and policy.training
    with reference_model(None, policy, accelerator) as reference:
        assert reference is policy and not policy.training  # no dropout in the reference
    assert policy.training  # back as it was


def test_a_lora_policy_is_its_own_reference_with_the_adapter_off(accelerator):
    ids = torch.tensor([[1, 5, 7, 9]])
    base = tiny_llama()
    with torch.no_grad():
        base_logits = base.eval()(input_ids=ids).logits
    # init_lora_weights=False: a random adapter that changes the outputs from the first step
    policy = get_peft_model(base.train(), LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False))
    with torch.no_grad(), reference_model(None, policy, accelerator) as reference:
        assert torch.allclose(reference(input_ids=ids).logits, base_logits)
    assert policy.training
    with torch.no_grad():
        assert not torch.allclose(policy.eval()(input_ids=ids).logits, base_logits)  # the adapter is on again
