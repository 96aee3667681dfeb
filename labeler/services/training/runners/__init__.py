"""The built-in stage runners: `run(ctx: StageContext) -> RunResult` for each stage; each stage's module in
training_stages/ names its runner, and RUNNERS maps a stage to it (the worker's dispatch).

    common.py    what the runners share (rows, split, Trainer arguments, train/resume, reward source); all public
    offline.py   SFT, RM, DPO (the rlhf Trainers on transformers.Trainer)
    ppo.py       PPO (our PPOTrainer's loop over a RolloutStream, rollouts.py)
    online.py    GRPO, RLOO and KTO (TRL 1.x trainers, the app's CPU defaults)

Imports point down only: runners import common, never each other, and common imports no runner. A runner's module
is imported when a run calls it (Stage.run): online.py imports TRL's trainers (torch) when it is imported, and the
worker's import of this package stays light.
"""
from __future__ import annotations

from typing import Callable

from labeler.services.settings import training_stages
from labeler.services.training.stages import RunResult, StageContext

RUNNERS: dict[str, Callable[[StageContext], RunResult]] = {name: stage.run
                                                            for name, stage in training_stages.STAGES.items()}
