"""The training stages, one module each: what a stage is, in one place.

    base.py    Stage (the facts every stage gives) and the row helpers the stages share
    sft.py rm.py dpo.py ppo.py grpo.py rloo.py kto.py online_dpo.py    one STAGE each: trainer config and app defaults, form
               fields, words for the Train tab and the model card, default charts, rows(db, project, job), runner

The preview (run_preview), the worker's dispatch (runners), the settings (train_configs), the Train tab's form and
run views, the model card (hub), jobs and evaluation read them here. Adding a stage: a module here, a line below,
and its name in job_settings.ALL_STAGES (and RewardSettings.STAGES when it samples answers): the settings' ground
floor imports no export code, so it keeps the names itself; tests/services/test_stage_registry.py checks they agree.
"""
from __future__ import annotations

from labeler.services.errors import InputError
from labeler.services.training_stages import dpo, grpo, kto, online_dpo, ppo, rloo, rm, sft
from labeler.services.training_stages.base import Stage

STAGES: dict[str, Stage] = {s.name: s for s in (sft.STAGE, rm.STAGE, dpo.STAGE, ppo.STAGE, grpo.STAGE, rloo.STAGE,
                                                 kto.STAGE, online_dpo.STAGE)}
NAMES = tuple(STAGES)


def get(name: str) -> Stage:
    if name not in STAGES:
        raise InputError(f"unknown stage {name!r}; choose one of {', '.join(NAMES)}", field="stage")
    return STAGES[name]


def names(**facts) -> tuple[str, ...]:
    """The stages whose facts have these values, e.g. names(samples=True): ppo, grpo, rloo."""
    return tuple(name for name, stage in STAGES.items() if all(getattr(stage, k) == v for k, v in facts.items()))
