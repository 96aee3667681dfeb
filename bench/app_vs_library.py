"""A PPO run started from the app against the library's own loop, same settings, one run (ABA order).

    python bench/app_vs_library.py               # 4 PPO steps each, default settings, reward=function (VADER)
    python bench/app_vs_library.py --steps 6 --set batch_size=32

The app's run goes through everything a user's does: `jobs.create_run` -> `accelerate launch -m labeler.worker`
-> runners.ppo.run_ppo, with metrics written to SQLite. The library's loop runs the same PPOConfig, prompts and
reward in a plain Python process (`python bench/app_vs_library.py --library`). Compared: the median of
`time/ppo/total` (the PPO step) and of the whole step (generate + score + step, from the step timestamps) over
the steps after the first. The app is run before and after the library (A B A), so a drift in the machine's
speed shows up as a difference between the two app runs. Target: the app within 10% of the library.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def app_run(steps: int, overrides: dict[str, str]) -> dict:
    from labeler.services.training import jobs
    from labeler.services.data import prompts
    from labeler.services.execution import run_metrics
    from storage import open_db

    with tempfile.TemporaryDirectory() as tmp:
        db = open_db(str(Path(tmp) / "bench.db"))
        prompts.import_shipped_prompts(db, "default")
        settings = {"reward": "function", "steps": steps, "checkpoint_every": 0, "eval_samples": 0, **overrides}
        run = jobs.create_run(db, "ppo", settings, runs_dir=Path(tmp) / "runs")
        done = jobs.wait(db, run.id, timeout=3600)
        if done.status != "succeeded":
            raise SystemExit(f"app run failed: {done.error}\n{run_metrics.log_tail(done)}")
        step_times = run_metrics.metrics_frame(db, run.id, ["time/ppo/total"])["value"].tolist()
        stamps = [row[0] for row in db.execute(
            "SELECT MIN(created_at) FROM metrics WHERE run_id = ? GROUP BY step ORDER BY step", [run.id])]
        threads = next((line for line in Path(done.log_path).read_text().splitlines() if "torch threads" in line), "")
    return {"ppo_step": step_times[1:], "iteration": _gaps(stamps), "threads_line": threads[:80]}


def _gaps(stamps: list[str]) -> list[float]:
    from labeler.services.execution.runs import parse_time

    times = [parse_time(s) for s in stamps]
    return [(b - a).total_seconds() for a, b in zip(times, times[1:])]


def library_run(steps: int, overrides: dict[str, str]) -> dict:
    """The same loop as runners.ppo.run_ppo, written with the library alone."""
    import torch

    from labeler import forms
    from labeler.services.data.prompts import SHIPPED_PROMPTS
    from labeler.services.settings.job_settings import JobConfig
    from rlhf.configs import PPOConfig
    from rlhf.generation import build_prompt_ids
    from rlhf.loading import load_tokenizer, resolve_model_path
    from rlhf.ppo import PPOTrainer
    from rlhf.rewards import FunctionReward
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    job = forms.build_config(JobConfig, {k: v for k, v in overrides.items() if k in JobConfig.__dataclass_fields__})
    config = forms.build_config(PPOConfig, {"seed": job.seed, "bf16": job.bf16,
                                            **{k: v for k, v in overrides.items() if k not in JobConfig.__dataclass_fields__}})
    path = resolve_model_path("default")
    tokenizer = load_tokenizer(path, padding_side="left")
    trainer = PPOTrainer(config, AutoModelForCausalLMWithValueHead.from_pretrained(path, seed=job.seed), None, tokenizer)
    reward = FunctionReward.from_spec(job.reward_function)
    lines = [t for i, t in enumerate(SHIPPED_PROMPTS.read_text().splitlines()) if t.strip() and i % 5 != 4]
    k = job.answers_per_prompt
    ppo_step, iteration, position = [], [], 0
    for _ in range(steps):
        t0 = time.perf_counter()
        texts = [lines[(position + i) % len(lines)] for i in range(config.batch_size // k) for _ in range(k)]
        position += config.batch_size // k
        # The shipped movie project's prompt format ('continue': plain text, no chat template), as the app's run uses.
        queries = [build_prompt_ids(tokenizer, t, use_chat_template=False) for t in texts]
        responses = trainer.generate(queries, return_prompt=False, batch_size=config.batch_size,
                                     max_new_tokens=job.max_new_tokens)
        answers = tokenizer.batch_decode(responses, skip_special_tokens=True)
        keep = [i for i, r in enumerate(responses) if len(r)] or [0]
        keep += [keep[0]] * (len(responses) - len(keep))
        scores = reward([texts[i] for i in keep], [answers[i] for i in keep])
        stats = trainer.step([queries[i] for i in keep], [responses[i] for i in keep], [torch.tensor(s) for s in scores])
        ppo_step.append(stats["time/ppo/total"])
        iteration.append(time.perf_counter() - t0)
    return {"ppo_step": ppo_step[1:], "iteration": iteration[1:], "threads_line": f"torch threads {torch.get_num_threads()}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="PPO steps per run (the first is a warm-up)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a PPO/job setting for both")
    parser.add_argument("--library", action="store_true", help=argparse.SUPPRESS)  # child: print the library's times
    args = parser.parse_args()
    from labeler import forms

    overrides = forms.parse_sets(args.set)
    if args.library:
        print(json.dumps(library_run(args.steps, overrides)))
        return

    def library() -> dict:
        child = subprocess.run([sys.executable, __file__, "--library", "--steps", str(args.steps),
                                *sum((["--set", s] for s in args.set), [])], capture_output=True, text=True)
        if child.returncode:
            raise SystemExit(f"library run failed:\n{child.stderr[-3000:]}")
        return json.loads(child.stdout.strip().splitlines()[-1])

    results = [("app", app_run(args.steps, overrides)), ("library", library()), ("app", app_run(args.steps, overrides))]
    print(f"\n{'run':10}{'PPO step s (median)':>22}{'whole step s (median)':>24}   threads")
    for name, r in results:
        print(f"{name:10}{statistics.median(r['ppo_step']):22.2f}{statistics.median(r['iteration']):24.2f}   {r['threads_line']}")
    app = [statistics.median(r["iteration"]) for name, r in results if name == "app"]
    lib = statistics.median(results[1][1]["iteration"])
    print(f"\napp / library, whole step: {statistics.mean(app) / lib:.2f} (target <= 1.10; the two app runs differ by "
          f"{abs(app[0] - app[1]) / lib:.0%} of the library's time: the machine's drift)")


if __name__ == "__main__":
    main()
