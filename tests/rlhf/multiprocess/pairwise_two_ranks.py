"""Run by tests/rlhf/test_multiprocess.py, once under `accelerate launch --num_processes 2` (gloo on CPU) with
2 pairs per device and once as 1 process with 4: the same global batch of preference pairs each step.

Trains a tiny reward model (RewardTrainer) and a tiny policy (DPOTrainer, reference log-probs precomputed)
for 3 steps each, without dropout, from the same seeded initial weights, and writes the logged losses and the
DPO cached reference log-probs to OUT/<tag>.json (the main process)."""
import json
import sys
from pathlib import Path

import torch
from accelerate import PartialState
from datasets import Dataset
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, LlamaConfig, LlamaForCausalLM

from rlhf.dpo import DPOConfig, DPOTrainer
from rlhf.loading import default_encoder_path, default_model_path
from rlhf.reward import RewardConfig, RewardTrainer

WORDS = ["good", "bad", "fine", "awful", "great", "dull", "bright", "grim"]


def pairs(n: int = 16) -> Dataset:
    return Dataset.from_list([{"prompt": f"Review {i}: the film was", "chosen": f" {WORDS[i % 8]} and {WORDS[(i + 3) % 8]}",
                               "rejected": f" {WORDS[(i + 1) % 8]}"} for i in range(n)])


def args(cls, out: Path, per_device: int, **extra):
    return cls(output_dir=str(out), per_device_train_batch_size=per_device, max_steps=3, logging_steps=1,
               learning_rate=1e-2, seed=0, data_seed=0, report_to="none", save_strategy="no",
               disable_tqdm=True, max_length=32, **extra)


def losses(trainer) -> list[float]:
    return [row["loss"] for row in trainer.state.log_history if "loss" in row]


def main(out: Path, tag: str, per_device: int) -> None:
    state = PartialState()
    torch.manual_seed(0)
    encoder = BertForSequenceClassification(BertConfig(
        vocab_size=30522, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_labels=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    rm = RewardTrainer(encoder, args=args(RewardConfig, out / "rm", per_device), train_dataset=pairs(),
                       processing_class=AutoTokenizer.from_pretrained(default_encoder_path()))
    rm.train()

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id))
    dpo = DPOTrainer(policy, args=args(DPOConfig, out / "dpo", per_device, max_prompt_length=16),
                     train_dataset=pairs(), processing_class=tokenizer)
    dpo.train()
    ref = list(dpo.train_dataset["ref_chosen_logps"])  # every rank computed them for the whole dataset
    if state.is_main_process:
        (out / f"{tag}.json").write_text(json.dumps({
            "num_processes": state.num_processes, "rm": losses(rm), "dpo": losses(dpo), "ref_chosen_logps": ref}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
