"""docs/GPU.md's table: each step from a Hub model id to a tuned model, with the memory it needs and the time it
takes at 1.5B (Qwen2.5-1.5B-Instruct) and 8B (Llama-3.1-8B-Instruct) on a 24 GB and an 80 GB GPU, from the app's
own estimates (no GPU was lent while this was written: nothing here is measured).

    python bench/gpu_plan.py                 # the markdown table docs/GPU.md holds
    python bench/gpu_plan.py --doc docs/GPU.md   # ... written into docs/GPU.md between its markers
    python bench/gpu_plan.py --json plan.json

Memory of a training step: what `rlhf-studio train STAGE --dry-run` prints (labeler/services/training/run_settings.py
resolve_run, then rlhf/memory_estimate.py on run_estimate.train_shape), for the recipe of the model's size; where
that exceeds 90% of the GPU (the dry run's warning), the plan adds lora=true, then load_in_4bit=true (QLoRA), as the
warning says to. The model is a folder holding only the hub model's config.json (written out below) and an empty
weights file: the estimate reads the config alone. Memory of inference (generate, eval, chat): the weights as the
model cache counts them on a GPU (the checkpoint's own dtype, bf16) plus the batch's KV cache; the evaluation holds
one model at a time beside the reward model that measures it. Add ~0.5-1 GiB for the CUDA context.

Time: the app's model-free micro-step (labeler/services/training/run_estimate.py model_free_micro_step: FLOPs at a
nominal 125 TFLOP/s for any GPU, generation at a quarter of it, weights read at 500 MB/s) and its PPO step arithmetic
(ppo_step_seconds). The app has no time estimate for the Trainer stages (rm, dpo): their steps are worked out here
with the same FLOP model (a training pass 3x a forward, 2x with LoRA, 4/3 more with checkpointing). A 24 GB card
is often slower than the nominal rate (dense bf16: RTX 4090 ~165, L4 ~120, A10G ~70 TFLOP/s); an 80 GB A100 ~310,
H100 ~990 peak, far above what these small batches reach. Treat times as the order of magnitude.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 1024**3
GPUS = {"24 GB": 24e9, "80 GB": 80e9}  # decimal GB as the cards are sold (24 GB = 22.4 GiB)
# The hub models' config.json, written out (no download): Qwen/Qwen2.5-1.5B-Instruct, meta-llama/Llama-3.1-8B-Instruct.
MODELS = {
    "1.5B": ("Qwen/Qwen2.5-1.5B-Instruct", "1.5b", {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536,
        "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16"}),
    "8B": ("meta-llama/Llama-3.1-8B-Instruct", "8b", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"}),
}


@dataclass(frozen=True)
class Work:
    """How much each step does in the plan (a first round of a team's project)."""

    prompts: int = 500  # imported training prompts
    answers_per_prompt: int = 2  # `generate --n 2`
    generate_batch: int = 16  # generate's --batch-size default
    prompt_tokens: int = 64  # run_estimate.PROMPT_TOKENS
    rm_passes: int = 3  # train rm's default: three passes over the pairs (one pair per ranked prompt)
    dpo_passes: int = 1
    pair_tokens: int = 256  # prompt + answer of a preference pair as rm/dpo see it (recipes answer in 128)
    ppo_steps: int = 100  # PPO batches of 64 answers
    heldout_prompts: int = 50
    eval_samples: int = 4
    chat_tokens: int = 256  # chat's --max-new-tokens default


def write_model_folder(folder: Path, config: dict) -> None:
    """config.json and an empty safetensors file: enough for the app's model checks and for its estimate."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({}, str(folder / "model.safetensors"))


def training_plan(db, project: str, stage: str, path: str, recipe: str, gpu_bytes: float, work: Work,
                  beside: float = 0.0) -> dict:
    """The recipe's settings, made to fit as the dry run advises; memory and time of the run. `beside`: bytes
    another model holds on the GPU during the run (PPO's reward model)."""
    from labeler.services.training import run_estimate, run_settings
    from rlhf.memory_estimate import estimate_training_memory, model_shape

    shape = model_shape(path)
    base = {"model": path, "recipe": recipe, "bf16": "true", "steps": 1, "reward": "function", "eval_samples": 0}
    if stage in ("rm", "dpo"):
        base["max_length"] = work.pair_tokens
    for extra, how in (({}, "recipe"), ({"lora": "true"}, "LoRA"), ({"lora": "true", "load_in_4bit": "true"}, "QLoRA")):
        resolved = run_settings.resolve_run(db, project, stage, {**base, **extra})
        job, trainer = resolved.job, resolved.trainer_config()
        estimate = estimate_training_memory(shape, run_estimate.train_shape(stage, job, trainer, "cuda"))
        if estimate.total + beside <= 0.9 * gpu_bytes:
            break
    else:
        how = "does not fit"
    if how == "recipe":
        how = "LoRA (recipe)" if job.lora else "full fine-tuning (recipe)"
    return {"memory": estimate.total + beside, "how": how, "seconds": _training_seconds(stage, shape, job, trainer, work),
            "parts": estimate.summary()}


def _training_seconds(stage: str, shape, job, trainer, work: Work) -> float:
    from labeler.services.training import run_estimate

    settings = run_estimate.MicroStepSettings(
        model_path="", bf16=True, lora=job.lora, lora_r=job.lora_r, lora_alpha=job.lora_alpha,
        rows=getattr(trainer, "mini_batch_size", None) or trainer.per_device_train_batch_size,
        max_new_tokens=job.max_new_tokens if stage == "ppo" else work.pair_tokens - work.prompt_tokens,
        answers_per_prompt=job.answers_per_prompt, advantage_estimator="rloo", prompts=(), chat_template=True,
        threads=1, generation_rows=getattr(trainer, "batch_size", 0) or 0,
        load_in_4bit=bool(getattr(trainer, "load_in_4bit", False)),
        gradient_checkpointing=bool(trainer.gradient_checkpointing))
    micro = run_estimate.model_free_micro_step(settings, shape, "cuda", prompt_tokens=work.prompt_tokens)
    if stage == "ppo":
        step = run_estimate.ppo_step_seconds(micro, trainer.batch_size, trainer.ppo_epochs)
        return micro.setup_seconds + work.ppo_steps * step
    # rm / dpo: per pass over the pairs, each pair's two sequences trained (the micro-step's train_seconds is one
    # mini-batch of `rows` sequences); DPO adds the reference's no-grad pass (half the micro-step's two).
    sequences = 2 * work.prompts * (work.rm_passes if stage == "rm" else work.dpo_passes)
    per_sequence = micro.train_seconds / settings.rows
    if stage == "dpo":  # the reference's forward (LoRA's: the base with the adapter off, a forward all the same)
        per_sequence += micro.forward_seconds / 2 / settings.rows
    return micro.setup_seconds + sequences * per_sequence


def reward_parameters(shape) -> int:
    """A sequence classifier on the model: its weights without the LM head (a tied head is the embeddings)."""
    return shape.parameters - (0 if shape.tied_embeddings else shape.head_parameters)


def inference_plan(shape, answers: int, rows: int, answer_tokens: int, prompt_tokens: int, models: int = 1,
                   reward_bytes: float = 0.0, weight_bytes: float = 2.0) -> dict:
    """Weights in the checkpoint's dtype (the model cache on a GPU loads 'auto': `weight_bytes` a parameter, bf16
    for a hub model) and the KV cache of `rows` answers; time at the micro-step's generation pace (2 FLOPs a weight
    a token at a quarter of the nominal rate)."""
    from labeler.services.training.run_estimate import GENERATION_EFFICIENCY, GPU_FLOPS, LOAD_BYTES_PER_SECOND

    weights = weight_bytes * shape.parameters
    kv = 2 * rows * (prompt_tokens + answer_tokens) * shape.layers * shape.kv_width * 2
    logits = rows * shape.vocab_size * 4  # one position's fp32 logits per row
    seconds = models * (weights / LOAD_BYTES_PER_SECOND
                        + answers * answer_tokens * 2 * shape.parameters / (GPU_FLOPS * GENERATION_EFFICIENCY))
    return {"memory": weights + kv + logits + reward_bytes, "seconds": seconds, "how": "weights",
            "parts": f"weights {weights / GIB:.1f}, KV cache {kv / GIB:.2f}"
                     + (f", reward model {reward_bytes / GIB:.1f}" if reward_bytes else "") + " GiB"}


def plan(work: Work) -> list[dict]:
    import rlhf.hardware

    # The planned GPUs (24 GB: RTX 4090, L4, A10G; 80 GB: A100, H100) all have native bf16: the estimate must not
    # take this CPU-only machine's answer (fp16 with a scaler). Put back afterwards: a test calls this in-process.
    native = rlhf.hardware.gpu_has_native_bf16
    rlhf.hardware.gpu_has_native_bf16 = lambda *args, **kwargs: True
    try:
        return _plan(work)
    finally:
        rlhf.hardware.gpu_has_native_bf16 = native


def _plan(work: Work) -> list[dict]:
    from labeler.services.data import projects
    from rlhf.memory_estimate import model_shape
    from storage import open_db

    rows, shapes = [], {}
    with tempfile.TemporaryDirectory(prefix="gpu-plan-") as tmp:
        db = open_db(str(Path(tmp) / "plan.db"))
        projects.create_project(db, "plan", answer_tokens=128)
        for size, (hub_id, recipe, config) in MODELS.items():
            folder = Path(tmp) / size
            write_model_folder(folder, config)
            shape = shapes[size] = model_shape(str(folder))
            answer = 128  # both recipes' answer length
            for gpu, gpu_bytes in GPUS.items():
                cell = {"size": size, "hub_id": hub_id, "gpu": gpu, "parameters": shape.parameters}
                cell["generate"] = inference_plan(shape, work.prompts * work.answers_per_prompt, work.generate_batch,
                                                  answer, work.prompt_tokens)
                for stage in ("rm", "dpo"):
                    cell[stage] = training_plan(db, "plan", stage, str(folder), recipe, gpu_bytes, work)
                # PPO holds the reward model beside the policy, in bf16 (runners/common.py); where the same size's
                # does not fit even beside QLoRA, a reward model trained on the 1.5B model does (a reward model
                # reads text: its tokenizer need not be the policy's).
                for rm_size in dict.fromkeys([size, "1.5B"]):
                    rm_weights = reward_parameters(shapes[rm_size])
                    ppo = training_plan(db, "plan", "ppo", str(folder), recipe, gpu_bytes, work, beside=2.0 * rm_weights)
                    if ppo["how"] != "does not fit":
                        break
                ppo["how"] += f", {rm_size} reward model" if rm_size != size else ""
                ppo["parts"] += f"; reward model {2.0 * rm_weights / GIB:.1f} GiB beside it (bf16)"
                cell["ppo"] = ppo
                # The evaluation's measure is loaded as rlhf.reward.RewardScorer loads it without a dtype: fp32
                # (labeler/services/evals/evaluation.py _reward_model).
                # The tuned model is saved as it trained: full fine-tuning's fp32 master weights (4 bytes a parameter,
                # which 'auto' keeps), LoRA merged into its bf16 base (2). The evaluation holds it, then the base.
                tuned = 2.0 if "LoRA" in ppo["how"] else 4.0
                cell["eval"] = inference_plan(shape, work.heldout_prompts * work.eval_samples, 32, answer,
                                              work.prompt_tokens, models=2, reward_bytes=4.0 * rm_weights,
                                              weight_bytes=tuned)
                if cell["eval"]["memory"] > 0.9 * gpu_bytes:
                    cell["eval"]["how"] = "does not fit"
                cell["chat"] = inference_plan(shape, 1, 1, work.chat_tokens, work.prompt_tokens, weight_bytes=tuned)
                rows.append(cell)
        db.conn.close()
    return rows


STEPS = (("generate", "generate"), ("rm", "train rm"), ("ppo", "train ppo"), ("dpo", "train dpo"),
         ("eval", "eval"), ("chat", "chat"))


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def markdown(rows: list[dict], work: Work) -> str:
    columns = [f"{r['size']} on {r['gpu']}" for r in rows]
    lines = ["| step | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for key, name in STEPS:
        cells = []
        for r in rows:
            c = r[key]
            if c["how"] == "does not fit":
                cells.append(f"does not fit ({c['memory'] / GIB:.1f} GiB)")
                continue
            how = "" if key in ("generate", "eval", "chat") else f", {c['how']}"
            cells.append(f"{c['memory'] / GIB:.1f} GiB, {_duration(c['seconds'])}{how}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines += ["", f"Work assumed: {work.prompts} prompts x {work.answers_per_prompt} answers generated (batch "
              f"{work.generate_batch}); rm {work.rm_passes} passes and dpo {work.dpo_passes} over {work.prompts} pairs "
              f"of {work.pair_tokens} tokens; ppo {work.ppo_steps} steps of 64 answers of 128 tokens; eval "
              f"{work.heldout_prompts} held-out prompts x {work.eval_samples} answers from the tuned model and its "
              f"base; chat one {work.chat_tokens}-token answer. Estimate, not measured."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--ppo-steps", type=int, default=Work.ppo_steps)
    parser.add_argument("--prompts", type=int, default=Work.prompts)
    parser.add_argument("--json", default="", help="also write the figures here")
    parser.add_argument("--doc", default="", help="write the table into this markdown file between its markers")
    args = parser.parse_args(argv)
    work = Work(prompts=args.prompts, ppo_steps=args.ppo_steps)
    rows = plan(work)
    print(markdown(rows, work))
    for r in rows:
        for key, _ in STEPS:
            print(f"{r['size']} {r['gpu']} {key}: {r[key]['parts']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str) + "\n")
    if args.doc:
        write_doc(Path(args.doc), markdown(rows, work))
    return rows


DOC_START, DOC_END = "<!-- bench/gpu_plan.py --doc docs/GPU.md rewrites from here -->", "<!-- to here -->"


def write_doc(path: Path, table: str) -> None:
    """The table between the doc's two marker lines (kept), the rest of the file as it was."""
    text = path.read_text()
    if DOC_START not in text or DOC_END not in text.split(DOC_START, 1)[1]:
        raise SystemExit(f"{path}: no lines {DOC_START!r} ... {DOC_END!r} to write the table between")
    head, rest = text.split(DOC_START, 1)
    tail = rest.split(DOC_END, 1)[1]
    path.write_text(f"{head}{DOC_START}\n{table}{DOC_END}{tail}")


if __name__ == "__main__":
    main()
