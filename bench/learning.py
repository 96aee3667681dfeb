"""Learning per CPU-minute: the shipped PPO recipe against TRL's classic sentiment-example settings, in one run.

    python bench/learning.py                            # both recipes, evaluated after 5, 10 and 20 minutes
    python bench/learning.py --recipes default --minutes 2,5 --set learning_rate=3e-5
    python bench/learning.py --recipes classic,default --minutes 5 --eval-samples 2

The task is the seeds' one on the embedded SmolLM2-135M-Instruct: answer a movie-review opening (chat template)
positively. Training prompts are the shipped ones outside the held-out split (rlhf.evaluation's split: every
fifth line), the reward is VADER. At each mark the training clock stops and the policy is evaluated on the
held-out prompts (rlhf.evaluation.evaluate_policy): positive share (VADER compound of the answer alone > 0.5),
mean KL to the base model (nats per answer, on the policy's own samples), distinct-2 of all answers.

Recipes:
- classic: the project's old defaults, TRL's sentiment example (lr 1.41e-5, batch 16, 4 epochs of mini-batch 4,
  init_kl_coef 0.2, 24 new tokens, GAE with a fresh value head, reward VADER of prompt + answer);
- default: what `rlhf-studio train ppo --set reward=function` runs with no other setting (the PPOConfig and
  JobConfig defaults).
The recipes run one after the other (each needs the whole machine); the machine's speed drifts, so compare
figures within one run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = ROOT / "labeler" / "data" / "movie_prompts.txt"

CLASSIC = {"learning_rate": 1.41e-5, "batch_size": 16, "mini_batch_size": 4, "ppo_epochs": 4, "init_kl_coef": 0.2,
           "advantage_estimator": "gae"}


def split_prompts() -> tuple[list[str], list[str]]:
    lines = [line.strip() for line in PROMPTS.read_text().splitlines() if line.strip()]
    return [t for i, t in enumerate(lines) if i % 5 != 4], [t for i, t in enumerate(lines) if i % 5 == 4]


def recipe(name: str, overrides: dict) -> tuple[dict, dict]:
    """(PPOConfig values, job values: max_new_tokens, reward) of a recipe."""
    from labeler.services.settings.job_settings import JobConfig

    job = JobConfig()
    if name == "classic":
        return {**CLASSIC, **overrides}, {"max_new_tokens": 24, "reward": "vader-with-prompt", "bf16": True,
                                          "answers_per_prompt": 1}
    return dict(overrides), {"max_new_tokens": job.max_new_tokens, "reward": job.reward_function, "bf16": job.bf16,
                             "answers_per_prompt": job.answers_per_prompt}


def run_recipe(name: str, overrides: dict, marks_minutes: list[float], eval_samples: int, seed: int,
               prompt_format: str = "continue") -> list[dict]:
    import torch

    from rlhf import evaluation
    from rlhf.configs import PPOConfig
    from rlhf.generation import build_prompt_ids
    from rlhf.loading import load_causal_lm, load_tokenizer, resolve_model_path
    from rlhf.ppo import PPOTrainer
    from rlhf.rewards import FunctionReward
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    ppo_values, job = recipe(name, overrides)
    config = PPOConfig(**{"seed": seed, "bf16": job["bf16"], **ppo_values})
    path = resolve_model_path("default")
    tokenizer = load_tokenizer(path, padding_side="left")
    model = AutoModelForCausalLMWithValueHead.from_pretrained(path, seed=seed)
    base = load_causal_lm(path).eval()
    trainer = PPOTrainer(config, model, None, tokenizer)
    reward = FunctionReward.from_spec(job["reward"])
    train, heldout = split_prompts()
    import random
    random.Random(seed).shuffle(train)
    # The app renders prompts in the project's format; the shipped movie project's is 'continue'.
    chat_template = None if prompt_format == "chat" else False

    def build_query(text: str):
        return build_prompt_ids(tokenizer, text, use_chat_template=chat_template)

    def evaluate(minutes: float, steps: int) -> dict:
        result = evaluation.evaluate_policy(trainer.unwrapped_model.pretrained_model, tokenizer, heldout,
                                            evaluation.answer_vader, ref_model=base, samples=eval_samples,
                                            max_new_tokens=16, seed=1234, bf16=job["bf16"], build_query=build_query)
        row = {"recipe": name, "minutes": minutes, "steps": steps, "positive": result.positive_share,
               "reward": result.mean_reward, "kl": result.mean_kl, "distinct2": result.distinct_2,
               "length": result.mean_length, "example": result.rows[0]["answer"]}
        print(f"  [{name}] {minutes:5.1f} min, {steps:3d} steps: positive {row['positive']:.2f}, reward "
              f"{row['reward']:.3f}, KL {row['kl']:.2f}, distinct-2 {row['distinct2']:.2f}, length "
              f"{row['length']:.1f} | {row['example']!r}", flush=True)
        return row

    print(f"{name}: {config}", flush=True)
    rows = [evaluate(0.0, 0)]
    k = job["answers_per_prompt"]
    position, trained = 0, 0.0
    generation = {"max_new_tokens": job["max_new_tokens"]}
    for mark in marks_minutes:
        while trained < mark * 60:
            t0 = time.perf_counter()
            n_prompts = config.batch_size // k
            texts = [train[(position + i) % len(train)] for i in range(n_prompts) for _ in range(k)]
            position += n_prompts
            queries = [build_query(text) for text in texts]
            responses = trainer.generate(queries, return_prompt=False, batch_size=config.batch_size, **generation)
            answers = tokenizer.batch_decode(responses, skip_special_tokens=True)
            keep = [i for i, r in enumerate(responses) if len(r) > 0]
            if len(keep) < len(responses):  # rare: an immediate EOS; repeat a kept one to fill the batch
                keep += [keep[0]] * (len(responses) - len(keep))
            scores = reward([texts[i] for i in keep], [answers[i] for i in keep])
            stats = trainer.step([queries[i] for i in keep], [responses[i] for i in keep],
                                 [torch.tensor(s) for s in scores])
            trained += time.perf_counter() - t0
            if trainer.current_step % 2 == 0:
                print(f"    step {trainer.current_step}: {trained / 60:.1f} min, score {stats['ppo/mean_scores']:.3f}, "
                      f"kl {stats['objective/kl']:.2f}, beta {stats['objective/kl_coef']:.3f}, clipfrac "
                      f"{stats['ppo/policy/clipfrac']:.2f}, approxkl {stats['ppo/policy/approxkl']:.3f}, "
                      f"len {stats['tokens/responses_len_mean']:.1f}, {stats['time/ppo/total']:.1f}s step", flush=True)
        rows.append(evaluate(trained / 60, trainer.current_step))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default="classic,default", help="comma-separated: classic, default")
    parser.add_argument("--minutes", default="5,10,20", help="training minutes at which to evaluate")
    parser.add_argument("--eval-samples", type=int, default=4, help="answers per held-out prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt-format", choices=["continue", "chat"], default="continue",
                        help="how prompts reach the model (the shipped movie project: continue)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="PPOConfig override for every recipe (e.g. learning_rate=3e-5)")
    args = parser.parse_args()
    from labeler import forms
    from rlhf.configs import PPOConfig

    specs = {spec.name: spec for spec in forms.field_specs(PPOConfig)}
    overrides = {k: forms.parse_value(specs[k], v) for k, v in forms.parse_sets(args.set).items()}
    marks = [float(m) for m in args.minutes.split(",")]
    import torch

    print(f"torch threads {torch.get_num_threads()}; held-out prompts {len(split_prompts()[1])} x {args.eval_samples} "
          f"samples, 16 new tokens", flush=True)
    table = []
    for name in args.recipes.split(","):
        table += run_recipe(name, overrides, marks, args.eval_samples, args.seed, args.prompt_format)
    print(f"\n{'recipe':10}{'minutes':>8}{'steps':>7}{'positive':>10}{'reward':>8}{'KL':>7}{'distinct-2':>12}{'length':>8}")
    for r in table:
        print(f"{r['recipe']:10}{r['minutes']:8.1f}{r['steps']:7d}{r['positive']:10.2f}{r['reward']:8.3f}"
              f"{r['kl']:7.2f}{r['distinct2']:12.2f}{r['length']:8.1f}")
    print("targets after 20 minutes: positive >= 0.90, KL <= 10, distinct-2 >= 0.45")


if __name__ == "__main__":
    main()
