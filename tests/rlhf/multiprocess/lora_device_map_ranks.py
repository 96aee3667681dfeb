"""Run by tests/rlhf/test_multiprocess.py under `accelerate launch --num_processes 2` (gloo on CPU).

Each rank (1) asks model_load_kwargs where a QLoRA and a LoRA model go with CUDA faked (bitsandbytes' config
stubbed: no GPU here), reading the LOCAL_RANK the launcher gave it, and (2) on the real CPU loads a small LoRA
policy with model_load_kwargs, takes one PPO step under DDP and writes the adapters' digest to OUT/rank{r}.json.
"""
import hashlib
import json
import os
import sys
import types
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import LlamaConfig, LlamaForCausalLM

import rlhf.precision as precision
from rlhf.configs import PPOConfig
from rlhf.ppo import PPOTrainer
from rlhf.value_head import AutoModelForCausalLMWithValueHead

TOKENIZER = types.SimpleNamespace(pad_token_id=0, eos_token_id=0, save_pretrained=lambda d: None)


def faked_cuda_maps() -> dict:
    real_available, real_bnb = torch.cuda.is_available, precision.bnb_4bit_config
    torch.cuda.is_available, precision.bnb_4bit_config = (lambda: True), (lambda compute: "nf4")
    try:
        return {"qlora": precision.model_load_kwargs(PPOConfig(load_in_4bit=True, bf16=True), lora=True)["device_map"],
                "lora": precision.model_load_kwargs(PPOConfig(bf16=True), lora=True)["device_map"],
                "full": precision.model_load_kwargs(PPOConfig(), lora=False).get("device_map")}
    finally:
        torch.cuda.is_available, precision.bnb_4bit_config = real_available, real_bnb


def main(out: Path) -> None:
    maps = faked_cuda_maps()
    accelerator = Accelerator()
    rank = accelerator.process_index
    base = out / "base"
    if accelerator.is_main_process:
        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                     tie_word_embeddings=True, eos_token_id=0, pad_token_id=0)).save_pretrained(base)
    accelerator.wait_for_everyone()
    from peft import LoraConfig

    config = PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=1, learning_rate=1e-2, bf16=False)
    load = precision.model_load_kwargs(config, lora=True)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(
        base, peft_config=LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0), **load)
    trainer = PPOTrainer(config, model, None, TOKENIZER, accelerator=accelerator)
    g = torch.Generator().manual_seed(10 + rank)
    trainer.step([torch.randint(1, 16, (3,), generator=g) for _ in range(2)],
                 [torch.randint(1, 16, (3,), generator=g) for _ in range(2)], [torch.tensor(float(rank)), torch.tensor(2.0)])
    adapters = hashlib.sha256()
    for name, p in sorted(trainer.unwrapped_model.named_parameters()):
        if "lora_" in name:
            adapters.update(p.detach().float().numpy().tobytes())
    (out / f"rank{rank}.json").write_text(json.dumps({
        "local_rank": int(os.environ["LOCAL_RANK"]), "maps": maps, "load_device_map": load.get("device_map"),
        "devices": sorted({str(p.device) for p in trainer.unwrapped_model.parameters()}),
        "adapters": adapters.hexdigest()}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
