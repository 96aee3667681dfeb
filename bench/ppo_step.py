"""One PPO iteration on the default model: the optimised path against a naive baseline, in the same run.

    python bench/ppo_step.py                       # batch 16, 16 new tokens, 4 epochs of mini-batch 4, 3 rounds
    python bench/ppo_step.py --ablations           # also the optimised path with each lever off in turn (~3.5 GB each)
    python bench/ppo_step.py --variants no-bf16    # only this one besides optimised and naive
    python bench/ppo_step.py --batch-size 8 --rounds 5
    python bench/ppo_step.py --trl-python /tmp/trlvenv/bin/python   # also TRL 0.11.4's notebook loop (README)
    python bench/ppo_step.py --recipe default --profile no-bf16        # where a step of the app's recipe goes, fp32
    python bench/ppo_step.py --recipe default --only no-bf16,fp32-lora # interleaved, ratios to the first listed

--recipe default is `train ppo`'s defaults (PPOConfig's: 16 prompts x 4 answers = batch 64, RLOO, 2 epochs of
mini-batch 16, learning rate 3e-5; 16 new tokens); the plain bench is TRL's notebook recipe above.
--profile VARIANT runs that variant alone (no interleaving: a breakdown, not a comparison) and prints each
part's share of the iteration (generation, the policy's and the reference's no-grad passes, the training
forward and backward passes, the optimizer) with the matrix-product FLOPs each part did (counted with
torch's FlopCounterMode in the warm-up iteration, which is not timed) against this CPU's fp32 and bf16 GEMM peak,
measured first.

An iteration is generation + scoring (VADER compound of query + response) + trainer.step(). Every response
is 16 tokens long (min_new_tokens), so all variants do the same work.
Optimised: the whole batch generated at once (left padding), bf16 autocast for generation and every forward
pass, freed memory kept in the process (rlhf/cpu_memory.py), only the response positions through the LM head,
mini-batches without the left padding they share.
Naive baseline: one query at a time through generate, everything in fp32, glibc's default allocator: what
the classic TRL notebook loop does.
Variants run in their own processes and take turns (bench/interleave.py), so drift in the machine's speed
hits them alike; each process's peak RSS is its own. The first iteration of each is a warm-up.
TRL (--trl-python, a venv with trl==0.11.4): its PPOTrainer in the IMDB notebook's loop (one generate per
query, fp32) on the same model, prompts, reward and settings (bench/trl_side.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads that sleep instead of spinning while they wait, as the app's worker runs (supervision.spawn): on a
# shared machine (load 10+ on 2 cores) spinning made a 16 x 16-token generate take 40 s instead of 5 s. Every
# variant, TRL's included, inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from interleave import median, paired_ratio, run_from_command_line  # noqa: E402

PROMPTS = Path(__file__).resolve().parents[1] / "labeler" / "data" / "movie_prompts.txt"

# Each lever of the optimised path; a variant is a setting of all of them.
OPTIMISED = {"batched_generation": True, "bf16": True, "keep_freed_memory": True}
# Levers tried on a CPU without fast bf16 (issue 26); off in every variant above.
FP32_LEVERS = {"lora": False, "foreach_adam": False, "compile": False}
VARIANTS = {
    "optimised": OPTIMISED,
    "naive": {lever: False for lever in OPTIMISED},
    **{f"no-{lever.replace('_', '-')}": {**OPTIMISED, lever: False} for lever in OPTIMISED},
    # fp32 (what an AVX2-only CPU runs) with one more lever on each
    **{f"fp32-{lever.replace('_', '-')}": {**OPTIMISED, "bf16": False, lever: True} for lever in FP32_LEVERS},
}
RECIPES = {
    # name: (batch_size, mini_batch_size, ppo_epochs, answers_per_prompt, learning_rate, advantage_estimator)
    "bench": (16, 4, 4, 1, 1.41e-5, "gae"),
    "default": (64, 16, 2, 4, 3e-5, "rloo"),  # PPOConfig's defaults, as `train ppo` runs them
}


def setup(variant: str, args: argparse.Namespace):
    import torch
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    from rlhf.configs import PPOConfig
    from rlhf.loading import load_tokenizer, resolve_model_path
    from rlhf.ppo import PPOTrainer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    levers = {**FP32_LEVERS, **VARIANTS[variant]}
    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_model_path("default")
    tokenizer = load_tokenizer(path)
    peft_config = None
    if levers["lora"]:  # the app's --set lora=true: rank 8 on every linear layer
        from peft import LoraConfig

        peft_config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, task_type="CAUSAL_LM", target_modules="all-linear")
    model = AutoModelForCausalLMWithValueHead.from_pretrained(path, peft_config=peft_config, seed=0)
    config = PPOConfig(batch_size=args.batch_size, mini_batch_size=args.mini_batch_size, ppo_epochs=args.ppo_epochs,
                       learning_rate=args.learning_rate, advantage_estimator=args.advantage_estimator,
                       bf16=levers["bf16"], keep_freed_memory=levers["keep_freed_memory"], seed=0)
    optimizer = None
    if levers["foreach_adam"]:  # the trainer's default is fused Adam; this is torch's multi-tensor loop
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(trainable, lr=config.learning_rate, foreach=True)
    trainer = PPOTrainer(config, model, None, tokenizer, optimizer=optimizer)
    if levers["compile"]:  # the policy's forward (and so its backward) through torch.compile's inductor on CPU
        trainer.model.pretrained_model.forward = torch.compile(trainer.model.pretrained_model.forward, dynamic=True)
    vader = SentimentIntensityAnalyzer()
    lines = PROMPTS.read_text().splitlines()
    n_prompts = args.batch_size // args.answers_per_prompt
    generation = dict(return_prompt=False, max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
                      allow_kl_unsafe=True,  # min_new_tokens: equal work for every variant; the KL bias is no matter here
                      batch_size=args.batch_size if levers["batched_generation"] else 1)

    def iteration(i: int) -> dict:
        # answers_per_prompt answers to each prompt, next to each other (RLOO's groups), as the app samples them
        texts = [lines[(i * n_prompts + k) % len(lines)] for k in range(n_prompts) for _ in range(args.answers_per_prompt)]
        queries = [tokenizer(t, return_tensors="pt").input_ids[0] for t in texts]
        t0, c0 = time.perf_counter(), time.process_time()
        responses = trainer.generate(queries, **generation)
        t1 = time.perf_counter()
        answers = tokenizer.batch_decode(responses, skip_special_tokens=True)
        scores = [torch.tensor(vader.polarity_scores(q + a)["compound"]) for q, a in zip(texts, answers)]
        t2 = time.perf_counter()
        trainer.step(queries, responses, scores)
        t3 = time.perf_counter()
        # CPU seconds of all threads: less sensitive than wall time to other people's jobs on a shared box.
        return {"generate": t1 - t0, "score": t2 - t1, "step": t3 - t2, "total": t3 - t0,
                "cpu_total": time.process_time() - c0}

    iteration.trainer = trainer  # for --profile's timers
    return iteration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--mini-batch-size", type=int, default=4)
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="",
                        help="set batch size, mini-batch, epochs, answers per prompt, learning rate and estimator "
                             "together: bench (the default flags) or default (`train ppo`'s defaults)")
    parser.add_argument("--answers-per-prompt", type=int, default=1, help="answers sampled per prompt (RLOO's groups)")
    parser.add_argument("--learning-rate", type=float, default=1.41e-5)
    parser.add_argument("--advantage-estimator", choices=["gae", "rloo"], default="gae")
    parser.add_argument("--profile", metavar="VARIANT", choices=sorted(VARIANTS),
                        help="run this variant alone and print where an iteration's time goes (see above)")
    parser.add_argument("--trl", choices=["fastest", "notebook", "both"], default="fastest",
                        help="with --trl-python: TRL 0.11.4's fastest setting (the whole batch per generate call, "
                             "bf16 per --trl-bf16), its notebook loop (one generate per query, fp32), or both")
    parser.add_argument("--trl-bf16", choices=["auto", "on", "off"], default="auto",
                        help="bf16 mixed precision for TRL's fastest setting (auto: where this CPU runs bf16 fast)")
    headline = lambda args: (f"PPO iteration on the default model: batch {args.batch_size} ({args.answers_per_prompt} "  # noqa: E731
                             f"answers per prompt, {args.advantage_estimator}), {args.max_new_tokens} new tokens, "
                             f"{args.ppo_epochs} epochs of mini-batch {args.mini_batch_size}; {args.rounds} rounds after a warm-up")

    def trl(args):
        from rlhf.hardware import bf16_is_fast
        from rlhf.loading import resolve_model_path

        common = ["ppo", "--model", resolve_model_path("default"), "--prompts", str(PROMPTS),
                  "--batch-size", str(args.batch_size), "--mini-batch-size", str(args.mini_batch_size),
                  "--ppo-epochs", str(args.ppo_epochs), "--max-new-tokens", str(args.max_new_tokens),
                  "--answers-per-prompt", str(args.answers_per_prompt), "--learning-rate", str(args.learning_rate),
                  "--threads", str(args.threads)]
        bf16 = {"on": True, "off": False}.get(args.trl_bf16, None)
        bf16 = bf16_is_fast("cpu") if bf16 is None else bf16
        out = {}
        if args.trl in ("fastest", "both"):
            out["trl-0.11-fastest" + ("-bf16" if bf16 else "-fp32")] = [
                *common, "--generation-batch-size", str(args.batch_size), *(["--bf16"] if bf16 else [])]
        if args.trl in ("notebook", "both"):
            out["trl-0.11-notebook"] = common
        return out

    args, _ = parser.parse_known_args()
    apply_recipe(args)
    if args.profile:
        rounds = argparse.ArgumentParser(add_help=False)  # --rounds is interleave's flag, added later
        rounds.add_argument("--rounds", type=int, default=3)
        args.rounds = rounds.parse_known_args()[0].rounds
        profile(args)
        return
    run = run_from_command_line(parser, VARIANTS, setup, __file__, 3.5, headline, trl, adjust=apply_recipe)
    if run is None:  # this process was a child serving one variant
        return
    args, variants, results, peaks = run
    ours = [v for v in variants if v in VARIANTS]
    baseline = ours[0] if args.only else "naive"
    base = results[baseline]
    print(f"\n{'median of rounds':24}{'generate s':>12}{'step s':>10}{'total s':>10}{'total CPU s':>13}"
          f"{'peak RSS MB':>13}{'x ' + baseline + ' (paired)':>24}")
    for name in variants:
        r = results[name]
        print(f"{name:24}{median(r, 'generate'):12.2f}{median(r, 'step'):10.2f}{median(r, 'total'):10.2f}"
              f"{median(r, 'cpu_total'):13.2f}{peaks[name]:13.0f}{paired_ratio(base, r, 'total'):24.2f}")
    if "optimised" in results and "naive" in results:
        opt, naive = results["optimised"], results["naive"]
        print(f"\nspeed-up of optimised over naive, median of per-round ratios: generate x{paired_ratio(naive, opt, 'generate'):.2f}, "
              f"step x{paired_ratio(naive, opt, 'step'):.2f}, total x{paired_ratio(naive, opt, 'total'):.2f} (target >= 3), "
              f"total CPU x{paired_ratio(naive, opt, 'cpu_total'):.2f}; "
              f"peak RSS ratio {peaks['optimised'] / peaks['naive']:.2f} (target <= 1)")
    for trl_name in [v for v in variants if v not in VARIANTS]:
        trl_results = results[trl_name]
        for name in ours:
            r = results[name]
            print(f"{name} vs TRL {trl_name}, median of per-round ratios: total x{paired_ratio(trl_results, r, 'total'):.2f} "
                  f"(target >= 3), step x{paired_ratio(trl_results, r, 'step'):.2f}, generate "
                  f"x{paired_ratio(trl_results, r, 'generate'):.2f}, total CPU x{paired_ratio(trl_results, r, 'cpu_total'):.2f}; "
                  f"peak RSS {peaks[name]:.0f} MB vs {peaks[trl_name]:.0f} MB: x{peaks[name] / peaks[trl_name]:.2f} (target <= 1)")


def apply_recipe(args: argparse.Namespace) -> None:
    if args.recipe:
        (args.batch_size, args.mini_batch_size, args.ppo_epochs, args.answers_per_prompt, args.learning_rate,
         args.advantage_estimator) = RECIPES[args.recipe]
    if args.batch_size % args.answers_per_prompt:
        raise SystemExit(f"--answers-per-prompt {args.answers_per_prompt} must divide --batch-size {args.batch_size}")


def gemm_peak(dtype, size: int = 2048, seconds: float = 2.0) -> tuple[float, float]:
    """(GFLOP/s, GFLOP per CPU-second) of one square matrix product in `dtype` on this CPU with torch's threads:
    the most a matmul-bound step could reach. The best of repeated timings over about `seconds` (a shared
    machine only slows it down); per CPU-second is what a product gets from the cores it is given, so it
    holds on a loaded machine where wall time does not."""
    import torch

    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    torch.mm(a, b)  # warm-up: first call picks the kernel
    best, best_cpu, deadline = float("inf"), float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t, c = time.perf_counter(), time.process_time()
        torch.mm(a, b)
        best, best_cpu = min(best, time.perf_counter() - t), min(best_cpu, time.process_time() - c)
    flop = 2 * size**3 / 1e9
    return flop / best, flop / best_cpu


class PartTimer:
    """Wall time and matrix-product FLOPs per part of an iteration, from wrappers around the trainer's methods.

    Parts: generate (model.generate), policy_nograd / reference_nograd (the rollout forward passes: policy and
    reference alternate there), train_forward (forward passes with gradients), backward, optimizer (step and
    zero_grad). The rest of trainer.step (losses, stats, layout) is what the step took beyond them."""

    PARTS = ("generate", "policy_nograd", "reference_nograd", "train_forward", "backward", "optimizer")

    def __init__(self, trainer):
        import torch

        self.seconds = dict.fromkeys(self.PARTS, 0.0)
        self.cpu = dict.fromkeys(self.PARTS, 0.0)  # CPU seconds of all threads
        self.flops = dict.fromkeys(self.PARTS, 0)
        self.counter = None  # a FlopCounterMode while counting
        self._nograd_calls = 0
        timer = self

        def wrap(owner, name, part_of):
            original = getattr(owner, name)

            def timed(*a, **k):
                part = part_of(*a, **k)
                before = timer.counter.get_total_flops() if timer.counter is not None else 0
                t, c = time.perf_counter(), time.process_time()
                try:
                    return original(*a, **k)
                finally:
                    timer.seconds[part] += time.perf_counter() - t
                    timer.cpu[part] += time.process_time() - c
                    if timer.counter is not None:
                        timer.flops[part] += timer.counter.get_total_flops() - before
            setattr(owner, name, timed)

        def forward_part(*a, **k):
            if torch.is_grad_enabled():
                return "train_forward"
            timer._nograd_calls += 1
            return "policy_nograd" if timer._nograd_calls % 2 == 1 else "reference_nograd"

        wrap(trainer, "_forward", forward_part)
        wrap(trainer.accelerator, "backward", lambda *a, **k: "backward")
        wrap(trainer.optimizer, "step", lambda *a, **k: "optimizer")
        wrap(trainer.optimizer, "zero_grad", lambda *a, **k: "optimizer")
        wrap(trainer.unwrapped_model.pretrained_model, "generate", lambda *a, **k: "generate")

    def reset(self) -> None:
        self.seconds = dict.fromkeys(self.PARTS, 0.0)
        self.cpu = dict.fromkeys(self.PARTS, 0.0)
        self.flops = dict.fromkeys(self.PARTS, 0)
        self._nograd_calls = 0


def profile(args: argparse.Namespace) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from rlhf.hardware import bf16_is_fast

    (fp32_peak, fp32_cpu_peak), (bf16_peak, bf16_cpu_peak) = gemm_peak(torch.float32), gemm_peak(torch.bfloat16)
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} torch threads, native bf16: {bf16_is_fast('cpu')}; "
          f"GEMM peak (2048^3, best of 2 s): fp32 {fp32_peak:.0f} GFLOP/s ({fp32_cpu_peak:.0f} per CPU-second), "
          f"bf16 {bf16_peak:.0f} GFLOP/s ({bf16_cpu_peak:.0f} per CPU-second)", flush=True)
    levers = {**FP32_LEVERS, **VARIANTS[args.profile]}
    print(f"variant {args.profile}: {levers}; batch {args.batch_size} ({args.answers_per_prompt} answers per prompt, "
          f"{args.advantage_estimator}), {args.max_new_tokens} new tokens, {args.ppo_epochs} epochs of mini-batch "
          f"{args.mini_batch_size}", flush=True)
    iteration = setup(args.profile, args)
    timer = PartTimer(iteration.trainer)
    with FlopCounterMode(display=False) as counter:  # the warm-up, untimed, counts the FLOPs
        timer.counter = counter
        iteration(0)
    timer.counter = None
    flops = dict(timer.flops)
    rounds = []
    for i in range(1, 1 + args.rounds):
        timer.reset()
        result = iteration(i)
        rounds.append({**result, **timer.seconds, **{f"cpu_{k}": v for k, v in timer.cpu.items()}})
        print(f"  round {i}: " + ", ".join(f"{k} {v:.2f}" for k, v in rounds[-1].items()), flush=True)
    total, cpu_total = median(rounds, "total"), median(rounds, "cpu_total")
    parts = {part: (median(rounds, part), median(rounds, f"cpu_{part}")) for part in PartTimer.PARTS}
    parts["score (VADER)"] = (median(rounds, "score"), 0.0)
    parts["rest of step"] = (max(0.0, total - sum(w for w, _ in parts.values())),
                             max(0.0, cpu_total - sum(c for _, c in parts.values())))
    precision = "bf16 autocast" if levers["bf16"] else "fp32"
    cpu_peak = bf16_cpu_peak if levers["bf16"] else fp32_cpu_peak
    print(f"\nmedian of {args.rounds} rounds, {precision}: iteration {total:.2f} s wall, {cpu_total:.2f} CPU-s "
          f"(shares of CPU time are steadier than wall time on a shared machine)")
    print(f"{'part':18}{'wall s':>8}{'share':>7}{'CPU s':>8}{'share':>7}{'GFLOP':>8}{'GFLOP/s':>9}{'/CPU-s':>8}"
          f"{'% fp32 peak':>13}{'% bf16 peak':>13}")
    rows = [*parts.items(), ("iteration", (total, cpu_total))]
    for part, (seconds, cpu) in rows:
        gflop = (sum(flops.values()) if part == "iteration" else flops.get(part, 0)) / 1e9
        rate, cpu_rate = (gflop / seconds if seconds > 0 else 0.0), (gflop / cpu if cpu > 0 else 0.0)
        print(f"{part:18}{seconds:8.2f}{seconds / total:7.0%}{cpu:8.2f}{cpu / cpu_total:7.0%}{gflop:8.1f}{rate:9.1f}"
              f"{cpu_rate:8.1f}{cpu_rate / fp32_cpu_peak:13.0%}{cpu_rate / bf16_cpu_peak:13.0%}")
    all_gflop = sum(flops.values()) / 1e9
    print(f"(matmul FLOPs as torch's FlopCounterMode counts them; % of peak per CPU-second, the GEMM's own; this "
          f"variant runs {precision}: the iteration reached {all_gflop / cpu_total / cpu_peak:.0%} of its peak per "
          f"CPU-second, {all_gflop / total / (bf16_peak if levers['bf16'] else fp32_peak):.0%} by wall time)")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
