"""How a policy run names several criteria: a weighted sum, or a reward under a constraint.

    reward=rm:helpful*0.7+rm:safe*0.3     a weighted sum of reward models' scores (TRL's reward_weights)
    reward=rm:helpful constraint=rm:safe>=0   maximise one, keeping the other's mean at or above 0 (Safe RLHF)

Each term is a reward spec of `reward_spec`'s grammar that scores answers (rm:NAME, a built-in or module:function);
people (human, mix) are not a term: they answer the run's criteria in the queue instead.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from labeler.services import reward_spec
from labeler.services.errors import InputError
from labeler.services.reward_spec import RewardSpec

_WEIGHTED = re.compile(r"^(?P<spec>.+?)\s*\*\s*(?P<weight>[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)$")
_CONSTRAINT = re.compile(r"^(?P<spec>.+?)\s*>=\s*(?P<threshold>[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)$")


@dataclass(frozen=True)
class Constraint:
    spec: RewardSpec
    threshold: float


def _scoring_term(text: str, field: str) -> RewardSpec:
    spec = reward_spec.parse(text, field)
    if spec.source in ("human", "mix"):
        raise InputError(f"{text!r}: people are not a term of a sum or a constraint; they answer the run's criteria "
                         "in the queue", field=field)
    return spec


def parse_weighted(text: str, field: str = "reward") -> list[tuple[RewardSpec, float]]:
    """`rm:a*0.7+rm:b*0.3` as [(spec, weight)]; a term without `*w` weighs 1. At least two terms."""
    terms = [term.strip() for term in str(text).split("+")]
    if len(terms) < 2 or not all(terms):
        raise InputError(f"{text!r}: a sum needs two or more terms, e.g. rm:helpful*0.7+rm:safe*0.3", field=field)
    weighted = []
    for term in terms:
        match = _WEIGHTED.match(term)
        spec_text, weight = (match.group("spec"), float(match.group("weight"))) if match else (term, 1.0)
        if not math.isfinite(weight) or weight == 0:
            raise InputError(f"{term!r}: a weight must be a non-zero number", field=field)
        weighted.append((_scoring_term(spec_text, field), weight))
    return weighted


def parse_constraint(text: str, field: str = "constraint") -> Constraint:
    """`rm:safe>=0` as Constraint(rm:safe, 0.0)."""
    match = _CONSTRAINT.match(str(text).strip())
    if match is None:
        raise InputError(f"{text!r}: a constraint reads SPEC>=NUMBER, e.g. rm:safe>=0", field=field)
    return Constraint(_scoring_term(match.group("spec"), field), float(match.group("threshold")))
