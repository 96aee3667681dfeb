"""Bytes a people-rewarded PPO run (reward human or mix) writes per step: before, a full checkpoint after every step
(fp32 weights, the value head then added to model.safetensors by reading and rewriting the whole file, Adam's
state); after, the step journal every step (labeler/services/execution/step_journal.py: the batch's answers, token ids
and rewards, one SQLite row) and the checkpoint, its weights written once with the head's keys, every N steps.

N is what the run's checkpoint_share (0.05) makes it: labeler/services/checkpoints.WeightsPacer writes the weights
once the time trained since the last write is 19x what the write took, so N = ceil(19 x write seconds / step
seconds): 1 when people take a few minutes a step and the write takes seconds, 20 when a step takes as long as the
write. The bytes are printed for several N (--every).

Bytes are counted, not timed (so the figures hold on a loaded machine): each write's bytes are the process's
`wchar` in /proc/self/io (bytes handed to write(2)) before and after. Two models: the embedded 135M model
(rlhf.loading.default_model_path()) and a randomly initialised model of Qwen2.5-1.5B's shape built from its config
(bench/gpu_check.py's), both in fp32 as PPO's master weights are. Adam's state (trainer_state.pt) is written for
the 135M model (moments made by one optimizer step with zero gradients); for the 1.5B shape, whose moments alone
are 12 GB, it is that file's measured bytes per parameter times the parameters (the moments are 8 bytes a
parameter in both). The old rewrite of model.safetensors is counted as a file copy of it (the same bytes written,
without holding a second copy of the weights in memory).

    python bench/checkpoint_bytes.py                   # both models, N = 1, 5, 20
    python bench/checkpoint_bytes.py --models 135m --every 1 10

Measured (AMD EPYC, AVX2 only, 2 cores, shared; bytes, not time; peak memory 7.7 GB), 64 answers x 128 tokens:
    135M: weights + head + tokenizer 541.6 MB, Adam's state 1.08 GB, the old rewrite 538.1 MB, journal row 131.8 kB
          before 2.16 GB a step; after: N=1 1.62 GB (x0.750), N=5 323.7 MB (x0.150), N=20 81.0 MB (x0.038)
    1.5B shape (1,544M parameters): weights 6.18 GB, Adam's state 12.35 GB (8.0017 bytes/parameter), the old
          rewrite 6.17 GB, journal row 131.8 kB
          before 24.71 GB a step; after: N=1 18.53 GB (x0.750), N=5 3.71 GB (x0.150), N=20 926.7 MB (x0.038)
The rewrite is gone whatever N (a quarter of every checkpoint's bytes); the rest scales with 1/N.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def written() -> int:
    """Bytes this process has handed to write(2) so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no wchar (Linux only)")


def counted(action) -> int:
    before = written()
    action()
    return written() - before


def journal_bytes(tokenizer, batch: int, answer_tokens: int) -> int:
    """One step's journal row written to a fresh database (WAL, as the app opens it): `batch` answers of
    `answer_tokens` tokens each, with their prompts and rewards."""
    import random

    from labeler.services.training import jobs
    from labeler.services.execution import step_journal
    from storage import open_db

    rng = random.Random(0)
    entries = []
    for i in range(batch):
        ids = [rng.randrange(1000, 40000) for _ in range(answer_tokens)]
        entries.append({"prompt": f"Question {i // 4} of the project, asked as a person would ask it?",
                        "answer": tokenizer.decode(ids), "response": ids, "score": rng.uniform(-1, 1)})
    with tempfile.TemporaryDirectory() as tmp:
        db = open_db(str(Path(tmp) / "studio.db"))
        run = jobs.create_run(db, "ppo", {"reward": "human"}, runs_dir=tmp, start=False)
        step_journal.record_step(db, run.id, 1, 0, entries[:1], [])  # the first write creates the WAL
        return counted(lambda: step_journal.record_step(db, run.id, 2, 0, entries, []))


def optimizer_bytes(model, folder: Path) -> int:
    """trainer_state.pt as PPOTrainer writes it, with Adam's moments of every parameter."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    for parameter in model.parameters():
        parameter.grad = None
    state = {"optimizer": optimizer.state_dict(), "step": 1}
    size = counted(lambda: torch.save(state, folder / "trainer_state.pt"))
    del optimizer, state
    return size


def measure(name: str, model, tokenizer, root: Path, optimizer_per_parameter: float | None) -> dict:
    """The checkpoint's bytes, after and before, for one model."""
    parameters = sum(p.numel() for p in model.pretrained_model.parameters())
    folder = root / name
    folder.mkdir()
    weights = counted(lambda: model.save_pretrained(folder))  # backbone + value head, head keys written with it
    weights += counted(lambda: tokenizer.save_pretrained(folder))
    model_file = folder / "model.safetensors"

    def rewrite():  # the old _add_trl_layout: model.safetensors read and written again in full
        shutil.copyfile(model_file, folder / "model.tmp")
        os.replace(folder / "model.tmp", model_file)
    rewritten = counted(rewrite)
    if optimizer_per_parameter is None:
        optimizer = optimizer_bytes(model.pretrained_model, folder)
        source = "written"
    else:
        optimizer = int(optimizer_per_parameter * parameters)
        source = f"{optimizer_per_parameter:.4f} bytes/parameter as measured at 135M"
    shutil.rmtree(folder)
    return {"model": name, "parameters": parameters, "weights": weights, "rewrite": rewritten,
            "optimizer": optimizer, "optimizer_source": source,
            "after": weights + optimizer, "before": weights + rewritten + optimizer}


def load_135m():
    from rlhf.loading import default_model_path, load_tokenizer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    path = default_model_path()
    return AutoModelForCausalLMWithValueHead.from_pretrained(path), load_tokenizer(path)


def build_15b():
    import torch
    from transformers import Qwen2ForCausalLM

    from bench.gpu_check import qwen_15b_config
    from rlhf.loading import load_tokenizer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    torch.manual_seed(0)
    with torch.device("cpu"):
        backbone = Qwen2ForCausalLM(qwen_15b_config(tiny=False)).float()
    return AutoModelForCausalLMWithValueHead(backbone), load_tokenizer("default")


def gb(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:,.2f} GB"
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["135m", "1.5b"], choices=["135m", "1.5b"])
    parser.add_argument("--every", nargs="+", type=int, default=[1, 5, 20], help="N: steps between weights writes")
    parser.add_argument("--batch", type=int, default=64, help="answers a step (the app's PPO default)")
    parser.add_argument("--answer-tokens", type=int, default=128, help="tokens an answer (the chat default)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()

    import gc

    import resource

    root = Path(tempfile.mkdtemp(prefix="checkpoint-bytes-", dir=args.dir))
    results, per_parameter = [], None
    try:
        for name in args.models:
            if name == "1.5b" and per_parameter is None:
                model, tokenizer = load_135m()  # the optimizer file's bytes per parameter, measured
                small = measure("135m-for-ratio", model, tokenizer, root, None)
                per_parameter = small["optimizer"] / small["parameters"]
                del model
                gc.collect()
            model, tokenizer = load_135m() if name == "135m" else build_15b()
            result = measure(name, model, tokenizer, root, None if name == "135m" else per_parameter)
            if name == "135m":
                per_parameter = result["optimizer"] / result["parameters"]
            result["journal"] = journal_bytes(tokenizer, args.batch, args.answer_tokens)
            results.append(result)
            del model
            gc.collect()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"bytes written per step of a people-rewarded PPO run ({args.batch} answers x {args.answer_tokens} tokens; "
          f"peak memory {gb(peak)})")
    for r in results:
        print(f"\n{r['model']}: {r['parameters'] / 1e6:,.0f}M parameters; checkpoint: weights + head + tokenizer "
              f"{gb(r['weights'])}, Adam's state {gb(r['optimizer'])} ({r['optimizer_source']}), old rewrite of "
              f"model.safetensors {gb(r['rewrite'])}; journal row {gb(r['journal'])}")
        print(f"  before (checkpoint every step, head added by rewriting): {gb(r['before'])} a step")
        for n in args.every:
            after = r["journal"] + r["after"] / n
            print(f"  after, weights every {n:>2} steps: {gb(after)} a step  (x{after / r['before']:.3f} of before)")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(math.isfinite(r["before"]) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
