"""A tiny stage runner for the job tests: linear regression with SGD, no trainer needed.

It exercises everything a real stage does with the run machinery: metrics and progress through the sink,
atomic checkpoints (weights as safetensors, optimizer and torch's RNG through torch.save), resume from the newest
complete checkpoint, early stop after the current step, a final model folder to register.
Each mini-batch is drawn with torch's global RNG, so a resume that did not restore the RNG (or the optimizer
momentum) would produce a different loss curve than an uninterrupted run.
"""
from __future__ import annotations

import os
import time

import torch
from safetensors.torch import load_file, save_file

from labeler.services.training.stages import RunResult, StageContext

STEP_SECONDS_ENV = "TOY_STEP_SECONDS"
STATE_FILE = "training_state.pt"  # optimizer, torch's RNG and the step; torch.load(weights_only=True) reads it


def _data():
    generator = torch.Generator().manual_seed(123)
    x = torch.randn(64, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(64, generator=generator)
    return x, y


def run(ctx: StageContext) -> RunResult:
    torch.manual_seed(ctx.job.seed)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = _data()
    start = 0
    resume = ctx.resume_checkpoint()
    if resume is not None:
        model.load_state_dict(load_file(resume / "model.safetensors"))
        state = torch.load(resume / STATE_FILE, weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        start = int(state["step"])
        ctx.sink.truncate_after(start)
        print(f"resumed from {resume} at step {start}", flush=True)
    total = ctx.job.steps
    ctx.sink.progress(start, total)
    delay = float(os.environ.get(STEP_SECONDS_ENV, "0"))
    loss = None
    for step in range(start + 1, total + 1):
        index = torch.randint(0, len(x), (8,))
        loss = torch.nn.functional.mse_loss(model(x[index]).squeeze(-1), y[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ctx.sink.log(step, {"loss": loss.item(), "lr": 0.05})
        ctx.sink.progress(step, total)
        if ctx.job.checkpoint_every and step % ctx.job.checkpoint_every == 0:
            def write(folder, step=step):
                save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors")
                torch.save({"optimizer": optimizer.state_dict(), "rng": torch.get_rng_state(), "step": step},
                           folder / STATE_FILE)
            ctx.save_checkpoint(step, write)
        if ctx.should_stop():
            print(f"early stop after step {step}", flush=True)
            break
        time.sleep(delay)
    ctx.final_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, ctx.final_dir / "model.safetensors")
    return RunResult(path=str(ctx.final_dir), kind="policy", base_model="toy-linear",
                     metrics={} if loss is None else {"final_loss": loss.item()}, data_snapshot="toy:64")
