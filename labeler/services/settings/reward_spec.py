"""One way to say where rewards come from, for training (`--set reward=...`) and evaluation (`eval --reward ...`).

    rm               the newest registered reward model      (training only: an evaluation names its model)
    rm:NAME          a reward model, by registry name or folder
    human            people rate or rank the answers in the queue                             (training only)
    mix | mix:NAME   people and a reward model (NAME: its warm start or frozen model)         (training only)
    vader            VADER sentiment of the answer alone (a built-in function)
    vader-with-prompt  VADER sentiment of prompt + answer
    MODULE:FUNCTION  a Python function (prompts, answers) -> one float per answer

Several criteria (training only), each term one of the scoring specs above (people are not a term):
    rm:helpful*0.7+rm:safe*0.3       a weighted sum (TRL's reward_weights); a term without *W weighs 1
    rm:helpful,rm:safe>=0            maximise the first under the constraint that the second's mean stays >= 0
                                     (Safe RLHF's Lagrangian: rlhf.constraints.ConstrainedReward)
    rm:helpful,rm:safe>=base         ... that it stays at the base model's own level (its first batch's mean)
    rm:helpful*0.7+rm:tone*0.3,rm:safe>=0   both
A combination is stored as reward=rm with the whole text as reward_model (RewardSpec.combined reads it back);
one reward model per criterion is `train rm --set criterion=NAME --set output_name=NAME`.

A run stores the parsed spec as JobConfig's three fields `reward` (rm | human | mix | function), `reward_model`
and `reward_function`, which is also how runs spelled it before this grammar: `reward=function
reward_function=vader` and `reward=rm reward_model=rm-run3` still parse to the same thing (`job_settings`).
"""
from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass
from typing import Any

from labeler.errors import InputError

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
    def combined(self) -> "Combined | None":
        """The sum or constraint a reward=rm's reward_model spells (None for one reward model)."""
        return parse_combined(self.model, "reward_model") if self.source == "rm" and is_combined(self.model) else None

    @property
    def imports_code(self) -> bool:
        """A module:function reward, or a combination with one: code the run imports (the web form may not name one)."""
        combined = self.combined
        if combined is not None:
            return any(spec.imports_code for spec in combined.specs)
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
    if is_combined(spec):
        return RewardSpec("rm", model=parse_combined(spec, field).text)
    return _parse_one(spec, field)


def _parse_one(spec: str, field: str) -> RewardSpec:
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


# ---- several criteria: a weighted sum, a constraint ------------------------------------------------------------
BASE_LEVEL = "base"  # SPEC>=base: held at the base's own level (the first batch's mean: rlhf.constraints)
_NUMBER = r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?"
_WEIGHTED = re.compile(rf"^(?P<spec>.+?)\s*\*\s*(?P<weight>{_NUMBER})$")
_CONSTRAINT = re.compile(rf"^(?P<spec>.+?)\s*>=\s*(?P<threshold>{_NUMBER}|{BASE_LEVEL})$")


@dataclass(frozen=True)
class Constraint:
    spec: RewardSpec
    threshold: float | None  # None: the base's own level (SPEC>=base)

    @property
    def threshold_text(self) -> str:
        return BASE_LEVEL if self.threshold is None else f"{self.threshold:g}"


@dataclass(frozen=True)
class Combined:
    """The reward as weighted terms (one term of weight 1 under a constraint alone), and the constraint if any."""
    terms: tuple[tuple[RewardSpec, float], ...]
    constraint: Constraint | None = None

    @property
    def specs(self) -> list[RewardSpec]:
        return [spec for spec, _ in self.terms] + ([self.constraint.spec] if self.constraint else [])

    @property
    def text(self) -> str:
        """The canonical spelling, stored as the run's reward_model."""
        reward = "+".join(f"{_spelled(spec)}*{weight:g}" for spec, weight in self.terms)
        return reward + (f",{_spelled(self.constraint.spec)}>={self.constraint.threshold_text}" if self.constraint else "")


def _spelled(spec: RewardSpec) -> str:
    if spec.source == "function":
        return spec.function
    return f"{spec.source}:{spec.model}" if spec.model else spec.source


def is_combined(text: Any) -> bool:
    """Whether a reward spec (or a stored reward_model) is a sum or a constraint. Registry names may hold '+' but
    never '*', '>=' or ',': a '+' alone makes a sum only when every term is a scoring spec ('rm:v1+v2' stays a
    model's name)."""
    spec = str(text or "")
    if any(mark in spec for mark in ("*", ">=", ",")):
        return True
    if "+" not in spec:
        return False
    try:
        return all(_scoring_term(term.strip(), "reward") for term in spec.split("+"))
    except InputError:
        return False


def _scoring_term(text: str, field: str) -> RewardSpec:
    spec = _parse_one(text, field) if text else None
    if spec is None:
        raise InputError("an empty term", field=field)
    if any(mark in spec.model for mark in "*>=,"):  # never in a registry name: a weight or threshold gone wrong
        raise InputError(f"{text!r}: a weight reads *NUMBER and a constraint SPEC>=NUMBER or SPEC>=base", field=field)
    if spec.source in ("human", "mix"):
        raise InputError(f"{text!r}: people are not a term of a sum or a constraint; they answer the run's criteria "
                         "in the queue", field=field)
    return spec


def parse_weighted(text: str, field: str = "reward", min_terms: int = 2) -> list[tuple[RewardSpec, float]]:
    """`rm:a*0.7+rm:b*0.3` as [(spec, weight)]; a term without `*w` weighs 1."""
    terms = [term.strip() for term in str(text).split("+")]
    if len(terms) < min_terms or not all(terms):
        raise InputError(f"{text!r}: a sum needs two or more terms, e.g. rm:helpful*0.7+rm:safe*0.3", field=field)
    weighted = []
    for term in terms:
        match = _WEIGHTED.match(term)
        spec_text, weight = (match.group("spec"), float(match.group("weight"))) if match else (term, 1.0)
        if not math.isfinite(weight) or weight == 0:
            raise InputError(f"{term!r}: a weight must be a non-zero number", field=field)
        weighted.append((_scoring_term(spec_text.strip(), field), weight))
    return weighted


def parse_constraint(text: str, field: str = "constraint") -> Constraint:
    """`rm:safe>=0` as Constraint(rm:safe, 0.0); `rm:safe>=base` as Constraint(rm:safe, None)."""
    match = _CONSTRAINT.match(str(text).strip())
    if match is None:
        raise InputError(f"{text!r}: a constraint reads SPEC>=NUMBER or SPEC>=base, e.g. rm:safe>=0", field=field)
    threshold = match.group("threshold")
    return Constraint(_scoring_term(match.group("spec").strip(), field),
                      None if threshold == BASE_LEVEL else float(threshold))


def parse_combined(text: Any, field: str = "reward") -> Combined:
    """`SUM` or `REWARD,CONSTRAINT` (the grammar in the module's docstring); InputError naming `field`."""
    reward, sep, constraint = str(text).strip().partition(",")
    if sep and "," in constraint:
        raise InputError(f"{text!r}: one constraint at most (REWARD,SPEC>=NUMBER or REWARD,SPEC>=base)", field=field)
    terms = parse_weighted(reward, field, min_terms=1 if sep else 2)
    return Combined(tuple(terms), parse_constraint(constraint, field) if sep else None)


def reward_models(reward_model: str) -> list[str]:
    """The reward models a run's reward_model names: itself, or each rm term's of a combination (a blank one is
    the newest registered, left out)."""
    if not is_combined(reward_model):
        return [reward_model] if reward_model else []
    return [spec.model for spec in parse_combined(reward_model, "reward_model").specs
            if spec.source == "rm" and spec.model]


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
    """The keys among raw run settings (reward, reward_function, online DPO's judge: the same grammar) that name
    code to import (module:function): what the web form may not send. A value that does not parse (judge=people
    included) is left to resolve_run_config to refuse or take."""
    found = []
    for key in ("reward", "reward_function", "judge"):
        value = values.get(key)
        if value in (None, ""):
            continue
        try:
            spec = parse(value, key) if key != "reward_function" else RewardSpec("function",
                                                                                  function=parse_function(value, key))
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
