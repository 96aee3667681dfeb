"""The default PPO recipe end to end, as a user runs it: the wall time against the preview's estimate, and what it
learned on the shipped task's held-out prompts.

    python bench/default_recipe.py                           # the defaults, this CPU's precision
    python bench/default_recipe.py --set bf16=false          # as on a CPU without fast bf16 (AVX2 only)
    python bench/default_recipe.py --set ppo_epochs=1 --label one-epoch --out runs.jsonl

What it does is what `rlhf-studio prompts import-shipped` then `rlhf-studio train ppo --set reward=function --wait`
do, through the same services: the preview (`train --dry-run`) first, with its measured micro-step and its
estimate of the whole run, then the run itself (worker process, held-out curve, automatic evaluation after it).
Printed: the estimate, the wall time from launch to the stored evaluation, the median step and its parts, and the
held-out positive share, KL to the base and distinct-2 before and after. Targets (issue 34 item 7): at most 20
minutes, at least 90% positive, KL at most 10, distinct-2 at least 0.45. One run a call, alone on the machine.
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

TARGETS = {"minutes": 20.0, "positive": 0.90, "kl": 10.0, "distinct_2": 0.45}


def cpu_kind() -> str:
    flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    found = [flag for flag in ("avx512_bf16", "amx_bf16") if flag in flags]
    return "+".join(found) if found else "no bf16 instructions (AVX2 or older)"


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def run_once(settings: dict[str, str]) -> dict:
    from labeler.services.evals import evaluation
    from labeler.services.training import jobs, run_preview
    from labeler.services.data import prompts
    from labeler.services.execution import run_metrics
    from storage import open_db

    with tempfile.TemporaryDirectory() as tmp:
        db = open_db(str(Path(tmp) / "bench.db"))
        prompts.import_shipped_prompts(db, "default")
        values = {"reward": "function", **settings}
        t0 = time.perf_counter()
        preview = run_preview.preview_run(db, "default", "ppo", values)
        preview_seconds = time.perf_counter() - t0
        estimate = preview.estimate
        print(preview.markdown().replace("  \n", "\n"), flush=True)
        t0 = time.perf_counter()
        run = jobs.create_run(db, "ppo", values, runs_dir=Path(tmp) / "runs")
        done = jobs.wait(db, run.id, timeout=3 * 3600)
        wall = time.perf_counter() - t0
        if done.status != "succeeded":
            raise SystemExit(f"run failed: {done.error}\n{run_metrics.log_tail(done)}")
        before, after = evaluation.run_comparison(db, run.id)
        step_times = run_metrics.metrics_frame(db, run.id, ["time/ppo/total"])["value"].tolist()
        stamps = [row[0] for row in db.execute(
            "SELECT MIN(created_at) FROM metrics WHERE run_id = ? GROUP BY step ORDER BY step", [run.id])]
        log = Path(done.log_path).read_text()
    return {
        "settings": settings, "cpu": cpu_kind(), "steps": len(step_times),
        "estimate_seconds": estimate.total_seconds if estimate else None,
        "estimate_step_seconds": estimate.step_seconds if estimate else None,
        "preview_seconds": preview_seconds, "wall_seconds": wall,
        "median_iteration_seconds": statistics.median(_gaps(stamps)) if len(stamps) > 2 else None,
        "median_ppo_step_seconds": statistics.median(step_times[1:]) if len(step_times) > 1 else None,
        "before": before.metrics if before else {}, "after": after.metrics if after else {},
        "log_tail": log.splitlines()[-6:],
    }


def _gaps(stamps: list[str]) -> list[float]:
    from datetime import datetime

    times = [datetime.fromisoformat(s).timestamp() for s in stamps]
    return [b - a for a, b in zip(times[1:], times[2:])]  # from the second step on: the first includes loading


def verdict(result: dict) -> str:
    after = result["after"]
    checks = {
        "minutes": result["wall_seconds"] / 60 <= TARGETS["minutes"],
        "positive": after.get("eval/positive_share", 0) >= TARGETS["positive"],
        "kl": after.get("eval/kl", float("inf")) <= TARGETS["kl"],
        "distinct_2": after.get("eval/distinct_2", 0) >= TARGETS["distinct_2"],
    }
    missed = [name for name, ok in checks.items() if not ok]
    return "all targets met" if not missed else "not met: " + ", ".join(missed)


def report(result: dict, label: str) -> str:
    before, after = result["before"], result["after"]
    est = result["estimate_seconds"]
    row = (f"| {label} | {result['cpu']} | {est / 60:.1f} min | **{result['wall_seconds'] / 60:.1f} min** | "
           f"{(result['median_iteration_seconds'] or 0):.1f} s | "
           f"{before.get('eval/positive_share', float('nan')):.0%} -> **{after.get('eval/positive_share', float('nan')):.0%}** | "
           f"{after.get('eval/kl', float('nan')):.2f} | {before.get('eval/distinct_2', float('nan')):.3f} -> "
           f"{after.get('eval/distinct_2', float('nan')):.3f} | {verdict(result)} |")
    header = ("| run | CPU | preview's estimate | wall, launch to evaluation | a step (median) | held-out positive "
              "| KL | distinct-2 | targets |\n|---|---|---|---|---|---|---|---|---|")
    return header + "\n" + row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a job or PPO setting, as `train --set` takes it")
    parser.add_argument("--label", default="", help="the row's name in the table (default: the settings)")
    parser.add_argument("--out", type=Path, help="append the result as a JSON line to this file")
    args = parser.parse_args()
    settings = parse_sets(args.set)
    result = run_once(settings)
    label = args.label or (", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults")
    print(report(result, label))
    print("\n".join(result["log_tail"]))
    if args.out:
        with args.out.open("a") as handle:
            handle.write(json.dumps({"label": label, **result}) + "\n")


if __name__ == "__main__":
    main()
