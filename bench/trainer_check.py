"""The trainers on one GPU, stage by stage, with time and peak memory per stage: generate, reward model, PPO,
GRPO, DPO and chat, for the embedded model (SmolLM2-135M) and for a randomly initialised model of Qwen2.5-1.5B's
shape (built from a config and saved in bf16, as hub checkpoints are; no download). What it checks is that each
stage runs at these sizes and what it costs; the random model learns nothing, so no quality is measured.

The trainers alone, without the app (bench/gpu_check.sh runs the app's own loop: CLI, database, worker processes,
web API). `--tiny` shrinks every size (and the 1.5B shape to 2 layers
of width 64, the vocabulary kept at 151,936) so the script runs on a CPU in a few minutes: that is how it is tested
where there is no GPU.

    python bench/trainer_check.py                     # both models, GPU sizes (recipe 1.5b: 128-token answers)
    python bench/trainer_check.py --models qwen1.5b-shape --lora
    python bench/trainer_check.py --tiny --device cpu
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = ("embedded", "qwen1.5b-shape")
STAGES = ("generate", "rm", "ppo", "grpo", "dpo", "chat")
PROMPTS = ["The movie was", "I think this restaurant", "My day started with", "The new phone is",
           "Yesterday's concert", "This book made me", "The weather today", "Our trip to the coast"]


@dataclass(frozen=True)
class Sizes:
    """Per-stage sizes: GPU (recipe 1.5b's answer length and mini-batch) or --tiny (a CPU check)."""

    answer_tokens: int
    generate_prompts: int
    ppo_batch: int
    ppo_mini_batch: int
    grpo_prompts: int
    generations: int
    dpo_pairs: int
    dpo_length: int
    steps: int


GPU_SIZES = Sizes(answer_tokens=128, generate_prompts=64, ppo_batch=64, ppo_mini_batch=8, grpo_prompts=16,
                  generations=4, dpo_pairs=8, dpo_length=512, steps=2)
TINY_SIZES = Sizes(answer_tokens=4, generate_prompts=4, ppo_batch=4, ppo_mini_batch=2, grpo_prompts=2,
                   generations=2, dpo_pairs=2, dpo_length=32, steps=1)


def qwen_15b_config(tiny: bool):
    """Qwen2.5-1.5B's shape (config.json of the hub model, written out); --tiny: 2 layers of width 64."""
    from transformers import Qwen2Config

    if tiny:
        return Qwen2Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                           max_position_embeddings=4096)
    return Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True,
                       max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6)


def build_random_model(folder: Path, tiny: bool, device: str) -> Path:
    """A random model of the 1.5B shape saved in bf16 with the embedded model's tokenizer (its ids are all below
    Qwen's vocabulary size), so the loaders' float32 master weights are exercised too."""
    import torch
    from transformers import Qwen2ForCausalLM

    from rlhf.loading import load_tokenizer

    tokenizer = load_tokenizer("default")
    config = qwen_15b_config(tiny)
    config.eos_token_id = config.pad_token_id = tokenizer.eos_token_id
    config.bos_token_id = tokenizer.bos_token_id
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    return folder


class Meter:
    """Wall time and peak memory of a block: GPU memory allocated by torch on CUDA, else the process's peak RSS."""

    def __init__(self, device: str):
        self.device = device
        self.rows: list[dict] = []

    @contextmanager
    def stage(self, model: str, stage: str):
        import torch

        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
        start = time.perf_counter()
        row = {"model": model, "stage": stage}
        try:
            yield row
            row["status"] = "ok"
        except Exception as error:  # one stage failing must not hide the others' figures
            row["status"] = f"FAILED: {type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"
        if self.device == "cuda":
            torch.cuda.synchronize()
            row["peak_gib"] = torch.cuda.max_memory_allocated() / 1024**3
        else:
            row["peak_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # process peak so far
        row["seconds"] = time.perf_counter() - start
        self.rows.append(row)
        print(f"{model:>16} {stage:>9}: {row['seconds']:8.1f} s  peak {row['peak_gib']:6.2f} GiB  {row['status']}"
              + (f"  {row['note']}" if row.get("note") else ""), flush=True)


def reward_length(completions, **kwargs):
    """A stand-in reward (the figures are time and memory, not learning): answers near 20 characters."""
    return [-abs(20 - len(str(c))) / 20 for c in completions]


def run_model(name: str, path: str, sizes: Sizes, args, meter: Meter, work: Path) -> None:
    import torch
    from datasets import Dataset

    from rlhf.configs import GenerationSettings, PPOConfig
    from rlhf.generation import build_prompt_ids, generate_batch
    from rlhf.loading import load_causal_lm, load_tokenizer
    from rlhf.precision import model_load_kwargs

    device = args.device
    bf16 = args.bf16
    tokenizer = load_tokenizer(path, padding_side="left")
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(sizes.generate_prompts)]
    lora = None
    if args.lora:
        from peft import LoraConfig

        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    common = dict(report_to="none", save_strategy="no", bf16=bf16, use_cpu=device == "cpu", logging_steps=1,
                  max_steps=sizes.steps, gradient_checkpointing=args.gradient_checkpointing, disable_tqdm=True)

    with meter.stage(name, "generate") as row:
        model = load_causal_lm(path).to(device)
        ids = [build_prompt_ids(tokenizer, p) for p in prompts]
        settings = GenerationSettings(max_new_tokens=sizes.answer_tokens, batch_size=len(ids), autocast=bf16,
                                      min_length=sizes.answer_tokens)
        out = generate_batch(model, tokenizer, ids, settings)
        row["note"] = f"{sum(len(o) for o in out)} tokens, {len(out)} answers"
        del model

    with meter.stage(name, "rm") as row:
        from rlhf.reward import RewardConfig, RewardTrainer

        pairs = Dataset.from_list([{"prompt": p, "chosen": " great, I loved it.", "rejected": " awful."}
                                   for p in PROMPTS[: max(2, sizes.dpo_pairs)]])
        rm_tokenizer = load_tokenizer(path, padding_side="right")
        config = RewardConfig(output_dir=str(work / f"{name}-rm"), max_length=sizes.dpo_length,
                              per_device_train_batch_size=max(2, sizes.dpo_pairs // 2), **common)
        trainer = RewardTrainer(path, args=config, train_dataset=pairs, processing_class=rm_tokenizer,
                                peft_config=_task(lora, "SEQ_CLS"))
        trainer.train()
        row["note"] = f"loss {trainer.state.log_history[-1].get('train_loss', float('nan')):.3f}"
        del trainer

    with meter.stage(name, "ppo") as row:
        from rlhf.ppo import PPOTrainer
        from rlhf.value_head import AutoModelForCausalLMWithValueHead

        config = PPOConfig(batch_size=sizes.ppo_batch, mini_batch_size=sizes.ppo_mini_batch, ppo_epochs=1, bf16=bf16,
                           learning_rate=3e-6, gradient_checkpointing=args.gradient_checkpointing,
                           rollout_forward_batch_size=sizes.ppo_mini_batch,
                           accelerator_kwargs={"cpu": device == "cpu"})
        model = AutoModelForCausalLMWithValueHead.from_pretrained(path, peft_config=lora,
                                                                  **model_load_kwargs(config, lora is not None))
        trainer = PPOTrainer(config, model.to(device), None, tokenizer)
        queries = [build_prompt_ids(tokenizer, prompts[i % len(prompts)]) for i in range(sizes.ppo_batch)]
        for _ in range(sizes.steps):
            responses = trainer.generate(queries, return_prompt=False, batch_size=sizes.ppo_batch,
                                         max_new_tokens=sizes.answer_tokens)
            scores = [torch.tensor(s) for s in reward_length(tokenizer.batch_decode(responses))]
            stats = trainer.step(queries, responses, scores)
        row["note"] = f"kl {stats['objective/kl']:.3f}, step {stats['time/ppo/total']:.1f} s"
        del trainer, model

    with meter.stage(name, "grpo") as row:
        from rlhf.grpo import GRPOConfig, GRPOTrainer

        rows = Dataset.from_list([{"prompt": PROMPTS[i % len(PROMPTS)]} for i in range(sizes.grpo_prompts * 2)])
        batch = sizes.grpo_prompts * sizes.generations
        config = GRPOConfig(output_dir=str(work / f"{name}-grpo"), num_generations=sizes.generations,
                            per_device_train_batch_size=min(batch, sizes.ppo_mini_batch * 2),
                            steps_per_generation=max(1, batch // min(batch, sizes.ppo_mini_batch * 2)),
                            max_completion_length=sizes.answer_tokens, beta=0.04, learning_rate=1e-6, **common)
        trainer = GRPOTrainer(path, reward_funcs=reward_length, args=config, train_dataset=rows, peft_config=lora)
        trainer.train()
        row["note"] = f"reward {trainer.state.log_history[0].get('reward', float('nan')):.3f}"
        del trainer

    with meter.stage(name, "dpo") as row:
        from rlhf.dpo import DPOConfig, DPOTrainer

        filler = " and so on" * (sizes.dpo_length // 8)
        pairs = Dataset.from_list([{"prompt": PROMPTS[i % len(PROMPTS)], "chosen": " it was lovely" + filler,
                                    "rejected": " it was bad" + filler} for i in range(max(2, sizes.dpo_pairs))])
        config = DPOConfig(output_dir=str(work / f"{name}-dpo"), max_length=sizes.dpo_length, learning_rate=1e-6,
                           per_device_train_batch_size=max(1, sizes.dpo_pairs // 2), **common)
        trainer = DPOTrainer(path, args=config, train_dataset=pairs, peft_config=lora,
                             processing_class=load_tokenizer(path, padding_side="right"))
        trainer.train()
        row["note"] = f"loss {trainer.state.log_history[-1].get('train_loss', float('nan')):.3f}"
        del trainer

    with meter.stage(name, "chat") as row:
        model = load_causal_lm(path, dtype="bfloat16" if bf16 else None).to(device).eval()
        ids = build_prompt_ids(tokenizer, [{"role": "user", "content": "Tell me about your favourite film."}])
        out = generate_batch(model, tokenizer, [ids], GenerationSettings(max_new_tokens=sizes.answer_tokens * 2,
                                                                         batch_size=1, autocast=bf16))
        row["note"] = f"{len(out[0])} tokens: {tokenizer.decode(out[0][:12], skip_special_tokens=True)!r}"
        del model


def _task(lora, task_type: str):
    if lora is None:
        return None
    from dataclasses import replace

    return replace(lora, task_type=task_type)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="auto: cuda when available")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and a 2-layer 1.5B-shape stand-in: a CPU check")
    parser.add_argument("--lora", action="store_true", help="train LoRA adapters (r 16) instead of all weights")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None,
                        help="recompute activations in backward (default: on for the 1.5B shape at GPU sizes)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast (default: where the hardware runs it fast)")
    parser.add_argument("--json", default="", help="also write the rows to this file")
    args = parser.parse_args(argv)
    import torch

    from rlhf.hardware import bf16_is_fast

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.bf16 is None:
        args.bf16 = bf16_is_fast(args.device)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(names) - set(MODELS)
    if unknown:
        parser.error(f"--models: unknown {', '.join(sorted(unknown))}; choose from {', '.join(MODELS)}")
    sizes = TINY_SIZES if args.tiny else GPU_SIZES
    device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    print(f"trainer_check on {device_name}: bf16 {args.bf16}, lora {args.lora}, sizes {sizes}", flush=True)
    meter = Meter(args.device)
    checkpointing = args.gradient_checkpointing
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        for name in names:
            args.gradient_checkpointing = bool(checkpointing if checkpointing is not None
                                               else name == "qwen1.5b-shape" and not args.tiny)
            if name == "embedded":
                from rlhf.loading import default_model_path

                path = str(default_model_path())
            else:
                with meter.stage(name, "build") as row:
                    path = str(build_random_model(work / "qwen1.5b-shape", args.tiny, args.device))
                    row["note"] = "random weights from Qwen2.5-1.5B's config, saved in bf16"
            run_model(name, path, sizes, args, meter, work)
    failed = [r for r in meter.rows if r["status"] != "ok"]
    names_failed = [(r["model"], r["stage"]) for r in failed]
    print(f"\n{len(meter.rows) - len(failed)} of {len(meter.rows)} stages ran"
          + (f"; failed: {names_failed}" if failed else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(meter.rows, indent=2))
    return meter.rows


if __name__ == "__main__":
    rows = main()
    sys.exit(1 if any(r["status"] != "ok" for r in rows) else 0)
