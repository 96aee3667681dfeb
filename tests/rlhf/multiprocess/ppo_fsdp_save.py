"""Run by tests/rlhf/test_multiprocess.py: `ppo_fsdp_save.py OUT MODE` with MODE "fsdp1" or "fsdp2" under
`accelerate launch --num_processes 2` (2 gloo ranks on the CPU), and MODE "single" as one plain process.

For a full policy and for a LoRA adapter on it: every rank builds the same tiny policy; under fsdp1/fsdp2 it is
sharded by hand with torch's FullyShardedDataParallel / fully_shard (accelerate offers FSDP on GPUs only). One
PPO step on the same rollouts on every rank (so FSDP's averaged gradient is the one process's), then
save_pretrained, save_checkpoint and the app's merged save (save_merged with the gathered weights) into
OUT/MODE-full/ and OUT/MODE-lora/. The test compares those folders with the single process's.
"""
import json
import sys
import types
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.configs import PPOConfig
from rlhf.ppo import PPOTrainer
from rlhf.value_head import AutoModelForCausalLMWithValueHead, create_reference_model

EOS = 0
TOKENIZER = types.SimpleNamespace(pad_token_id=EOS, eos_token_id=EOS, save_pretrained=lambda d: None)


def policy(lora: bool, base_dir: Path, accelerator: Accelerator) -> AutoModelForCausalLMWithValueHead:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)
    backbone = LlamaForCausalLM(config)
    if not lora:
        return AutoModelForCausalLMWithValueHead(backbone, seed=0)
    from peft import LoraConfig, get_peft_model

    if accelerator.is_main_process:  # loaded from a folder, as a real base is: the adapter names it
        backbone.save_pretrained(base_dir)
    accelerator.wait_for_everyone()
    backbone = get_peft_model(LlamaForCausalLM.from_pretrained(base_dir), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    with torch.no_grad():  # LoRA's B starts at zero: give the adapter a value so the merge shows
        for name, p in backbone.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(1))
    return AutoModelForCausalLMWithValueHead(backbone, seed=0)


def shard(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    if mode == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model, use_orig_params=True, device_id=torch.device("cpu"))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    return fully_shard(model, mesh=init_device_mesh("cpu", (torch.distributed.get_world_size(),)))


def main(out: Path, mode: str, lora: bool, accelerator: Accelerator) -> None:
    folder = out / f"{mode}-{'lora' if lora else 'full'}"
    model = policy(lora, folder / "base", accelerator)
    own_numel = sum(p.numel() for p in model.parameters())
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ref = None if lora else create_reference_model(model)  # the copy is made before sharding
    if mode != "single":
        model = shard(model, mode)
    config = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=1, learning_rate=1e-2, advantage_estimator="gae",
                       bf16=False, seed=0)
    trainer = PPOTrainer(config, model, ref, TOKENIZER, accelerator=accelerator)
    g = torch.Generator().manual_seed(0)  # the same rollouts on every rank
    queries = [torch.randint(1, 16, (3,), generator=g) for _ in range(4)]
    responses = [torch.randint(1, 16, (4,), generator=g) for _ in range(4)]
    scores = [torch.tensor(float(i)) for i in range(4)]
    stats = trainer.step(queries, responses, scores)
    trainer.save_pretrained(folder / "pretrained")
    trainer.save_checkpoint(folder / "checkpoint")
    weights = trainer.gathered_state_dict()  # what the app's run_ppo does at the end
    if accelerator.is_main_process:
        final = weights if weights is not None else trainer.unwrapped_model.state_dict()
        moved = sorted(k for k in initial if not torch.equal(initial[k], final[k]))  # what the step trained
        trainer.unwrapped_model.save_merged(folder / "merged", state_dict=weights)
        # what this rank's module holds itself after sharding (a save without the gather would see only this)
        local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in trainer.unwrapped_model.parameters())
        (folder / "info.json").write_text(json.dumps({
            "num_processes": accelerator.num_processes, "wrapper": type(trainer.model).__name__,
            "gathered": weights is not None, "loss": stats["ppo/loss/total"], "numel": own_numel, "local_numel": local,
            "moved": moved}))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    accelerator = Accelerator()
    for lora in (False, True):
        main(Path(sys.argv[1]), sys.argv[2], lora, accelerator)
