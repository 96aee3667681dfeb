"""A stage for the rank-failure tests (tests/services/test_rank_failure.py): the ranks meet in a gloo all-reduce
every step, step 1 is checkpointed, and after it the rank named by DYING_RANK_ENV ends itself as DYING_HOW_ENV
says: "SIGKILL" (nothing it can catch, as the OOM killer does) or "exit" (a plain exit with code 3)."""
from __future__ import annotations

import os
import signal
import time

import torch

from labeler.services.training.stages import RunResult, StageContext

DYING_RANK_ENV = "DYING_RANK"
DYING_HOW_ENV = "DYING_HOW"


def run(ctx: StageContext) -> RunResult:
    from accelerate import Accelerator

    # The gloo process group accelerate launch set up (Accelerator, not PartialState(): only AcceleratorState
    # reads ACCELERATE_USE_CPU, and without it a CPU-only rank believes it is alone).
    state = Accelerator()
    dying = int(os.environ.get(DYING_RANK_ENV, "-1"))
    for step in range(1, ctx.job.steps + 1):
        total = torch.ones(1)
        if state.num_processes > 1:
            torch.distributed.all_reduce(total)  # the step every rank must reach: a dead partner breaks it
        print(f"rank {state.process_index}: step {step}", flush=True)
        ctx.sink.log(step, {"loss": 1.0 / step, "ranks": total.item()})
        ctx.sink.progress(step, ctx.job.steps)
        ctx.save_checkpoint(step, lambda folder: (folder / "state.txt").write_text(str(step)))
        if step == 1 and state.process_index == dying:
            time.sleep(0.5)  # the main process is then waiting in step 2's all-reduce
            if os.environ.get(DYING_HOW_ENV) == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("a rank should have died after step 1")
