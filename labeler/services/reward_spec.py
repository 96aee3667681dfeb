"""One way to say where rewards come from, for training (`--set reward=...`) and evaluation (`eval --reward ...`).

    rm               the newest registered reward model      (training only: an evaluation names its model)
    rm:NAME          a reward model, by registry name or folder
    human            people rate or rank the answers in the queue                             (training only)
    mix | mix:NAME   people and a reward model (NAME: its warm start or frozen model)         (training only)
    vader            VADER sentiment of the answer alone (a built-in function)
    vader-with-prompt  VADER sentiment of prompt + answer
    MODULE:FUNCTION  a Python function (prompts, answers) -> one float per answer

A run stores the parsed spec as JobConfig's three fields `reward` (rm | human | mix | function), `reward_model`
and `reward_function`, which is also how runs spelled it before this grammar: `reward=function
reward_function=vader` and `reward=rm reward_model=rm-run3` still parse to the same thing (`job_settings`).
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from labeler.services.errors import InputError

SOURCES = ("rm", "human", "mix", "function")
# Named functions (rlhf.rewards.BUILTIN_FUNCTIONS' keys: the library's own names; not imported, as that would
# pull in VADER where only text is parsed). tests/services/test_reward_spec.py checks the two agree.
BUILTIN_FUNCTIONS = ("vader", "vader-with-prompt")
GRAMMAR = "rm, rm:NAME, human, mix, mix:NAME, vader, vader-with-prompt or module:function"
# A dotted Python module path; a function name.
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FUNCTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class RewardSpec:
    """A parsed reward: `source` is one of SOURCES; `model` the reward model's name for rm/mix (blank: the newest
    registered); `function` a built-in name or module:function for source function (else blank)."""

    source: str
    model: str = ""
    function: str = ""

    @property
    def imports_code(self) -> bool:
        """A module:function reward: code the run imports (the web form may not name one)."""
        return self.source == "function" and self.function not in ("", *BUILTIN_FUNCTIONS)


def _bad(text: str, why: str, field: str) -> InputError:
    return InputError(f"reward {text!r}: {why}; use {GRAMMAR}", field=field)


def _module_function(spec: str) -> str | None:
    """`module:function` with a dotted module path and a function name, stripped; None if `spec` is not one."""
    module, sep, function = spec.partition(":")
    module, function = module.strip(), function.strip()
    if not sep or not _MODULE.match(module) or not _FUNCTION.match(function):
        return None
    return f"{module}:{function}"


def parse_function(text: Any, field: str = "reward_function") -> str:
    """A reward function's spec: a built-in name or module:function (stripped); InputError naming `field`."""
    spec = str(text).strip()
    if spec in BUILTIN_FUNCTIONS:
        return spec
    checked = _module_function(spec)
    if checked is None:
        raise InputError(f"reward function {spec!r}: use {' or '.join(BUILTIN_FUNCTIONS)} or module:function "
                         "(e.g. my_rewards:score)", field=field)
    return checked


def parse(text: Any, field: str = "reward") -> RewardSpec:
    """A reward spec in the grammar above; InputError (one line, naming `field` and the value) if it is not one.

    `function` alone is the older training spelling's source word (the function is then reward_function's)."""
    spec = str(text if text is not None else "").strip()
    if not spec:
        raise _bad(spec, "no reward given", field)
    if spec in BUILTIN_FUNCTIONS:
        return RewardSpec("function", function=spec)
    if spec in SOURCES:
        return RewardSpec(spec)
    head, _, name = spec.partition(":")
    head, name = head.strip(), name.strip()
    if head in ("rm", "mix"):
        if not name:
            raise _bad(spec, f"{head}: needs a reward model name after the colon (or {head} alone for the newest)",
                       field)
        return RewardSpec(head, model=name)
    if head in ("human", "function"):
        raise _bad(spec, f"{head} takes no name", field)
    checked = _module_function(spec)
    if checked is None:
        if ":" not in spec:
            raise InputError(f"unknown reward {spec!r}: use {GRAMMAR}", field=field)
        raise _bad(spec, "expected module:function, e.g. my_rewards:score", field)
    return RewardSpec("function", function=checked)


# The words a person reads for each spec a form offers (choices()).
CHOICE_LABELS = {"vader": "Sentiment (VADER)", "vader-with-prompt": "Sentiment of prompt + answer (VADER)",
                 "human": "People rate the answers"}


def choices(reward_models: list[str]) -> list[tuple[str, str]]:
    """The specs a form offers, as (label, spec) pairs: the built-in functions, people, the newest reward model
    and each of `reward_models` (registry names, oldest first, as models.list_models gives them; listed newest
    first), alone and with people. Never a module:function: that names code to import (RewardSpec.imports_code),
    which only the command line may."""
    newest = f" ({reward_models[-1]})" if reward_models else ""
    named = list(reversed(reward_models))
    return [*((CHOICE_LABELS[name], name) for name in (*BUILTIN_FUNCTIONS, "human")),
            (f"Newest reward model{newest}", "rm"), *((f"Reward model {name}", f"rm:{name}") for name in named),
            (f"People + newest reward model{newest}", "mix"),
            *((f"People + reward model {name}", f"mix:{name}") for name in named)]


def job_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Raw run settings with a `reward` spec spelled out as JobConfig's fields (reward, reward_model,
    reward_function), the way a run stores it; settings already in that form are returned unchanged.

    `reward=rm:rm-run3` -> reward=rm, reward_model=rm-run3; `reward=vader` -> reward=function,
    reward_function=vader. A spec and an explicit reward_model/reward_function that disagree are refused."""
    out = dict(values)
    if out.get("reward_function") not in (None, ""):
        out["reward_function"] = parse_function(out["reward_function"])
    if "reward" not in out or out["reward"] is None:
        return out
    spec = parse(out["reward"])
    out["reward"] = spec.source
    for key, value in (("reward_model", spec.model), ("reward_function", spec.function)):
        if not value:
            continue
        given = out.get(key)
        if given not in (None, "") and str(given).strip() != value:
            raise InputError(f"reward={values['reward']!r} names {value!r} but {key}={given!r}: give one of them",
                             field=key)
        out[key] = value
    return out


def names_code(values: dict[str, Any]) -> list[str]:
    """The keys among raw run settings (reward, reward_function) that name code to import (module:function):
    what the web form may not send. A value that does not parse is left to resolve_run_config to refuse."""
    found = []
    for key in ("reward", "reward_function"):
        value = values.get(key)
        if value in (None, ""):
            continue
        try:
            spec = parse(value, key) if key == "reward" else RewardSpec("function", function=parse_function(value, key))
        except InputError:
            continue
        if spec.imports_code:
            found.append(key)
    return found


def import_function(spec: str, what: str, field: str):
    """The callable a `module:function` spec names, imported; InputError naming `what` (reward, measure) and the
    spec when the module or the name is missing or not callable."""
    module_name, _, attr = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise InputError(f"{what} {spec!r}: {error}", field=field) from None
    if not callable(function):
        raise InputError(f"{what} {spec!r} is not a function", field=field)
    return function
