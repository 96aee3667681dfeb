"""The built-in stage runners: `run(ctx: StageContext) -> RunResult` for each stage, looked up in RUNNERS.

    common.py    what the runners share (rows, split, Trainer arguments, train/resume, reward source); all public
    offline.py   SFT, RM, DPO (the rlhf Trainers on transformers.Trainer)
    ppo.py       PPO (our PPOTrainer's loop over a RolloutStream, rollouts.py)
    online.py    GRPO, RLOO and KTO (TRL 1.x trainers, the app's CPU defaults)

Imports point down only: runners import common, never each other, and common imports no runner.
"""
from __future__ import annotations

from typing import Callable

from labeler.services.runners import offline, ppo
from labeler.services.stages import RunResult, StageContext


def _online(name: str) -> Callable[[StageContext], RunResult]:
    """GRPO's, RLOO's or KTO's runner, loaded when a run calls it: online.py imports TRL's trainers (torch) when it
    is imported, and the worker's import of this package stays light."""
    def run(ctx: StageContext) -> RunResult:
        from labeler.services.runners import online

        return online.RUNNERS[name](ctx)
    return run


RUNNERS: dict[str, Callable[[StageContext], RunResult]] = {
    "sft": offline.run_sft, "rm": offline.run_rm, "dpo": offline.run_dpo, "ppo": ppo.run_ppo,
    "grpo": _online("grpo"), "rloo": _online("rloo"), "kto": _online("kto"),
}
