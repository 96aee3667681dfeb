"""SFTTrainer on a tiny random Llama: completion-only labels, formats, packing, learning, LoRA merge."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlhf.data import SFTCollator, pack_examples, tokenize_sft
from rlhf.peft_utils import merge_and_save
from rlhf.sft import SFTConfig, SFTTrainer

from param_checks import assert_trained


def config(tmp_path, **overrides) -> SFTConfig:
    defaults = dict(
        output_dir=str(tmp_path / "out"), learning_rate=1e-2, per_device_train_batch_size=4, num_train_epochs=1,
        logging_steps=1, save_strategy="no", disable_tqdm=True, seed=0, max_length=64,
    )
    return SFTConfig(**{**defaults, **overrides})


def sft_rows(n: int = 16) -> Dataset:
    return Dataset.from_list([{"prompt": f"Review {i}:", "completion": " A fine film."} for i in range(n)])


def test_prompt_tokens_and_padding_get_no_label(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    short = tokenize_sft({"prompt": "Hi", "completion": " there"}, tokenizer, 64)
    long = tokenize_sft({"prompt": "A longer prompt", "completion": " and answer"}, tokenizer, 64)
    n_prompt = len(tokenizer("Hi")["input_ids"])
    assert short["completion_mask"] == [0] * n_prompt + [1] * (len(short["input_ids"]) - n_prompt)
    assert short["input_ids"][-1] == tokenizer.eos_token_id  # the model learns to stop
    batch = SFTCollator(tokenizer.pad_token_id)([short, long])
    labels, ids = batch["labels"][0], batch["input_ids"][0]
    n = len(short["input_ids"])
    assert labels[:n_prompt].tolist() == [-100] * n_prompt
    assert labels[n_prompt:n].tolist() == ids[n_prompt:n].tolist()
    assert labels[n:].tolist() == [-100] * (len(labels) - n)  # padding (pad == EOS here) is not learned
    # completion_only_loss=False: the prompt is learned too, padding still is not
    full = SFTCollator(tokenizer.pad_token_id, completion_only_loss=False)([short, long])["labels"][0]
    assert full[:n].tolist() == ids[:n].tolist() and full[n:].tolist() == [-100] * (len(labels) - n)


def test_messages_and_text_rows(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}]
    row = tokenize_sft({"messages": messages}, tokenizer, 256)
    completion = [t for t, m in zip(row["input_ids"], row["completion_mask"]) if m]
    assert tokenizer.decode(completion) == "Hi!<|im_end|>\n"  # the last assistant turn, closed by the template
    assert tokenizer.decode(row["input_ids"]) == tokenizer.apply_chat_template(messages, tokenize=False)
    text = tokenize_sft({"text": "Plain text."}, tokenizer, 256)
    assert all(text["completion_mask"]) and text["input_ids"][-1] == tokenizer.eos_token_id


def test_packing_fills_blocks_without_padding(tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    examples = [tokenize_sft(r, tokenizer, None) for r in sft_rows(10)]
    total = sum(len(e["input_ids"]) for e in examples)
    packed = pack_examples({k: [e[k] for e in examples] for k in ("input_ids", "completion_mask")}, max_length=16)
    lengths = [len(b) for b in packed["input_ids"]]
    # ceil(total / 16) blocks, all full but the last, and nothing lost or reordered
    assert len(lengths) == -(-total // 16) and all(n == 16 for n in lengths[:-1])
    assert [t for b in packed["input_ids"] for t in b] == [t for e in examples for t in e["input_ids"]]
    trainer = SFTTrainer(str(tiny_model_dir), args=config(tmp_path, packing=True, max_length=16), train_dataset=sft_rows(10))
    assert len(trainer.train_dataset) == len(lengths)


def test_loss_is_cross_entropy_on_completion_tokens_only(tiny_model_dir, tmp_path):
    trainer = SFTTrainer(str(tiny_model_dir), args=config(tmp_path), train_dataset=sft_rows(4))
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch)
        logits = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    # by hand: mean over completion positions t of -log softmax(logits[t-1])[token t]
    terms = []
    for b in range(2):
        for t in range(1, batch["input_ids"].shape[1]):
            if batch["labels"][b, t] != -100:
                terms.append(-F.log_softmax(logits[b, t - 1].float(), -1)[batch["input_ids"][b, t]])
    assert loss.item() == pytest.approx(torch.stack(terms).mean().item(), abs=1e-4)


def test_sft_learns_and_saves(tiny_model_dir, tmp_path):
    trainer = SFTTrainer(str(tiny_model_dir), args=config(tmp_path, num_train_epochs=3), train_dataset=sft_rows(16), eval_dataset=sft_rows(4))
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    start = trainer.evaluate()["eval_loss"]
    trainer.train()
    end = trainer.evaluate()
    assert end["eval_loss"] < start - 1.0
    assert_trained(before, trainer.model)
    trainer.save_model(str(tmp_path / "saved"))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved").eval()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, trainer.model.eval()(ids).logits, atol=1e-5)


def test_lora_adapter_saves_and_merges(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = SFTTrainer(str(tiny_model_dir), args=config(tmp_path, max_steps=3), train_dataset=sft_rows(16), peft_config=lora)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    trainer.train()
    assert {k for k, v in trainer.model.named_parameters() if not torch.equal(before[k], v)} <= {
        k for k in before if "lora_" in k}
    assert_trained(before, trainer.model)
    trainer.save_model(str(tmp_path / "adapter"))
    ids = torch.tensor([[1, 2, 3, 4]])
    trainer.model.eval()
    with torch.no_grad():
        expected = trainer.model(ids).logits
    merged_dir = merge_and_save(trainer.model, tmp_path / "merged", trainer.processing_class)
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, expected, atol=1e-4)


@pytest.mark.parametrize(
    "bad, row, field",
    [
        ([{"prompt": "p", "completion": "c"}, {"prompt": "p", "completion": "  "}], 1, "completion"),
        ([{"messages": [{"role": "user"}]}], 0, "messages"),
        ([{"prompt": "p", "completion": [{"role": "assistant", "content": "c"}]}], 0, "completion"),
        ([{"question": "p"}], None, None),
    ],
)
def test_bad_rows_name_row_and_field(tiny_model_dir, tmp_path, bad, row, field):
    from rlhf.data import DataError

    with pytest.raises(DataError) as error:
        SFTTrainer(str(tiny_model_dir), args=config(tmp_path), train_dataset=Dataset.from_list(bad))
    assert (error.value.row, error.value.field) == (row, field)
