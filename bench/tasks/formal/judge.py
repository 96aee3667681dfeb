"""A polite, formal register: the judge of a team whose messages go to customers, landlords and managers.

    score = min(1, words / MIN_WORDS) * clip(0.5 + STEP * min(formal, MAX_FORMAL) - STEP * min(informal, MAX_INFORMAL), 0, 1)

- formal: how many different FORMAL_MARKERS the answer uses (each counts once, so repeating "please" earns
  nothing);
- informal: every occurrence of a contraction ("don't", "you're", "it's"; a possessive "customer's" is not one),
  a SLANG word, an exclamation mark, a word of three or more letters in CAPITALS, or an emoticon;
- the factor in front scales down answers shorter than MIN_WORDS (a bare "Certainly." is no message).

Scores lie in [0, 1] in steps of STEP (times the short-answer factor); an empty answer scores 0. The prompt is
not read: the register is the answer's. Pure and deterministic.
"""
from __future__ import annotations

import re
from typing import Sequence

from bench.tasks.text import check_lengths, words

STEP = 0.1
MAX_FORMAL = 4
MAX_INFORMAL = 5
MIN_WORDS = 5
FORMAL_MARKERS = ("please", "kindly", "thank you", "grateful", "appreciate", "would", "could", "sincerely",
                  "regards", "dear", "certainly", "assist", "assistance", "apologise", "apologize", "inform",
                  "request", "regarding", "further", "however")
SLANG = frozenset("""hey hi hiya yeah yep yup nope gonna wanna gotta kinda sorta cool awesome stuff guys dude lol
omg btw thx thanks ok okay super totally asap ya yo cheers""".split())
_FORMAL = [re.compile(rf"\b{re.escape(marker)}\b", re.I) for marker in FORMAL_MARKERS]
# n't 're 've 'll 'm 'd anywhere; 's only after the pronouns it contracts (it's, that's, let's ...).
CONTRACTION = re.compile(r"\b\w+['’](?:t|re|ve|ll|m|d)\b|\b(?:it|that|there|what|here|he|she|who|let)['’]s\b", re.I)
CAPITALS = re.compile(r"\b[A-Z]{3,}\b")
EMOTICON = re.compile(r"[:;]-?[()DPp]|[\U0001F300-\U0001FAFF]")


def formal_count(answer: str) -> int:
    return sum(1 for pattern in _FORMAL if pattern.search(answer))


def informal_count(answer: str) -> int:
    return (len(CONTRACTION.findall(answer)) + sum(1 for w in words(answer) if w.lower() in SLANG)
            + answer.count("!") + len(CAPITALS.findall(answer)) + len(EMOTICON.findall(answer)))


def score(answer: str) -> float:
    n = len(words(answer))
    if n == 0:
        return 0.0
    raw = 0.5 + STEP * min(formal_count(answer), MAX_FORMAL) - STEP * min(informal_count(answer), MAX_INFORMAL)
    return min(1.0, n / MIN_WORDS) * min(1.0, max(0.0, raw))


def judge(prompts: Sequence, answers: Sequence[str]) -> list[float]:
    """One score in [0, 1] per answer (the app's reward-function signature: prompts, answers)."""
    check_lengths(prompts, answers)
    return [score(a) for a in answers]
