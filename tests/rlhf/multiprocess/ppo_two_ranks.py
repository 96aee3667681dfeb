"""Run by tests/rlhf/test_multiprocess.py under `accelerate launch --num_processes 2` (gloo on CPU).

Each rank steps PPO twice on its own rollouts (rank r's scores are 4r..4r+3, so the global batch's are 0..7),
logs with a per-rank log_dir, saves one checkpoint, and writes what the test compares to OUT/rank{r}.json.
"""
import hashlib
import json
import sys
import types
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.configs import PPOConfig
from rlhf.ppo import TRAINER_STATE_FILE, PPOTrainer
from rlhf.value_head import AutoModelForCausalLMWithValueHead

EOS = 0
TOKENIZER = types.SimpleNamespace(pad_token_id=EOS, eos_token_id=EOS, save_pretrained=lambda d: None)


def weights_digest(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()


def main(out: Path) -> None:
    accelerator = Accelerator()
    rank = accelerator.process_index
    # Different initial weights per rank: preparing the model (DDP) must broadcast rank 0's.
    torch.manual_seed(rank)
    config = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)
    model = AutoModelForCausalLMWithValueHead(LlamaForCausalLM(config), seed=rank)
    # Two micro-batches per optimizer step: the first backward runs under no_sync, the second all-reduces. fp32 on
    # every CPU: with bf16 (the default where the CPU has it) the reference is a bf16 copy, not the initial weights.
    ppo = PPOConfig(batch_size=4, mini_batch_size=2, gradient_accumulation_steps=2, ppo_epochs=2, learning_rate=1e-2,
                    use_score_scaling=True, use_score_norm=True, log_dir=str(out / f"logs{rank}"), tensorboard=False,
                    bf16=False)
    calls = []
    trainer = PPOTrainer(ppo, model, None, TOKENIZER, accelerator=accelerator,
                         callback=lambda step, stats, samples: calls.append((step, len(samples))))
    initial = weights_digest(trainer.unwrapped_model)
    g = torch.Generator().manual_seed(100 + rank)  # different queries and answers on each rank
    results = []
    for _ in range(2):
        # RLOO groups: two answers to each of two queries, all on this rank.
        queries = [q for q in (torch.randint(1, 16, (3,), generator=g), torch.randint(1, 16, (4,), generator=g))
                   for _ in range(2)]
        responses = [torch.randint(1, 16, (int(torch.randint(2, 5, (1,), generator=g)),), generator=g)
                     for _ in range(4)]
        scores = [torch.tensor(float(4 * rank + i)) for i in range(4)]
        stats = trainer.step(queries, responses, scores)
        trainer.log_stats(stats, {"query": [f"r{rank}q{i}" for i in range(4)]}, scores)
        results.append(stats)
    trainer.save_checkpoint(out / "checkpoint")
    state = torch.load(out / "checkpoint" / TRAINER_STATE_FILE, weights_only=True)
    (out / f"rank{rank}.json").write_text(json.dumps({
        "num_processes": accelerator.num_processes, "distributed_type": str(accelerator.distributed_type),
        "initial": initial, "final": weights_digest(trainer.unwrapped_model),
        "ref": weights_digest(trainer.ref_model), "stats": results, "callbacks": calls,
        "running": [trainer.running.mean, trainer.running.var], "kl_coef": trainer.kl_ctl.value,
        "saved_rng_ranks": len(state["rng_per_rank"]),
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
