"""The training stages, one module each: what a stage is, in one place, as facts.

    base.py    Stage (the facts every stage gives) and the pure helpers the stages share
    sft.py rm.py dpo.py ppo.py grpo.py rloo.py kto.py online_dpo.py    one STAGE each: trainer config (named; the
               app's CPU defaults), app defaults, form fields, words for the Train tab and the model card, default
               charts, the rows it trains on and its runner (named "module:function", imported when asked for)

The registry is every module of this package with a STAGE, in the stages' `order`. The package stands on the
settings' ground floor (it imports no export, project or prompt code, and no torch), so the settings (job_settings),
the storage check of a run's stage (runs.insert_run), the preview and the estimate read the names and facts here,
and the CLI, the Train tab, the model card (hub), jobs and evaluation too. Adding a stage is a module here, its
trainer config and its runner (tests/services/test_stage_floor.py adds one and finds it everywhere a stage is picked
or stored).
"""
from __future__ import annotations

import importlib
import pkgutil

from labeler.errors import InputError
from labeler.services.settings.training_stages.base import Stage

STAGES: dict[str, Stage] = {}


def register(stage: Stage) -> Stage:
    """Add a stage to the registry (this package's modules are added when it is imported; a test adds its own
    before importing what reads the registry: the CLI's choices, the Train tab's radio)."""
    if stage.name in STAGES:
        raise ValueError(f"stage {stage.name!r} is registered twice")
    STAGES[stage.name] = stage
    return stage


def _stage_modules() -> list:
    modules = (importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__))
    return sorted((module.STAGE for module in modules if hasattr(module, "STAGE")), key=lambda stage: stage.order)


for _stage in _stage_modules():
    register(_stage)


def __getattr__(name: str):
    if name == "NAMES":  # the names in order, read when asked for: a stage registered later is among them
        return tuple(STAGES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(name: str) -> Stage:
    if name not in STAGES:
        raise InputError(f"unknown stage {name!r}; choose one of {', '.join(STAGES)}", field="stage")
    return STAGES[name]


def names(**facts) -> tuple[str, ...]:
    """The stages whose facts have these values, e.g. names(samples=True): ppo, grpo, rloo."""
    return tuple(name for name, stage in STAGES.items() if all(getattr(stage, k) == v for k, v in facts.items()))
