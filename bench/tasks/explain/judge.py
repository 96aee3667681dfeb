"""Complete against short: two criteria a team scores separately and that pull apart (issue 47, item 5).

    complete = 0.4 * coverage + 0.6 * min(1, points / FULL_POINTS)        judge A counts the points covered
    short    = 1 up to SHORT_WORDS words, then falling linearly to 0 at LONG_WORDS     judge B penalises length
    judge    = (complete + short) / 2                                     the team's one overall score

- coverage: share of the question's key terms the answer uses (concise's key_terms: words less stopwords, stemmed);
- points: distinct content words (stemmed, not stopwords, 3+ letters) the answer adds beyond the question's own,
  a crude count of the separate things it says; FULL_POINTS of them is a complete answer;
- an empty answer scores 0 on both (a constraint on shortness must not be met by saying nothing).

An answer gets more complete by saying more, and less short by the same words: a run on `complete` alone grows its
answers; a run on `short` alone cuts them; the sum and the constraint (`short` no worse than the base's) trade
between them. Pure and deterministic; every score in [0, 1].
"""
from __future__ import annotations

from typing import Sequence

from bench.tasks.concise.judge import STOPWORDS, coverage, key_terms, stem
from bench.tasks.text import check_lengths, prompt_text, words

FULL_POINTS = 20
SHORT_WORDS = 15
LONG_WORDS = 60


def points(question: str, answer: str) -> int:
    asked = key_terms(question)
    return len({stem(w) for w in words(answer) if w.lower() not in STOPWORDS and len(w) >= 3} - asked)


def complete_score(prompt, answer: str) -> float:
    if not words(answer):
        return 0.0
    question = prompt_text(prompt)
    return 0.4 * coverage(question, answer) + 0.6 * min(1.0, points(question, answer) / FULL_POINTS)


def short_score(answer: str) -> float:
    n = len(words(answer))
    if n == 0:
        return 0.0
    return 1.0 if n <= SHORT_WORDS else max(0.0, 1.0 - (n - SHORT_WORDS) / (LONG_WORDS - SHORT_WORDS))


def complete(prompts: Sequence, answers: Sequence[str]) -> list[float]:
    """Judge A (the criterion `complete`): the app's reward-function signature (prompts, answers)."""
    check_lengths(prompts, answers)
    return [complete_score(p, a) for p, a in zip(prompts, answers)]


def short(prompts: Sequence, answers: Sequence[str]) -> list[float]:
    """Judge B (the criterion `short`)."""
    check_lengths(prompts, answers)
    return [short_score(a) for a in answers]


def judge(prompts: Sequence, answers: Sequence[str]) -> list[float]:
    """The overall score: the mean of the two criteria (what the project's own score asks people for)."""
    return [(c + s) / 2 for c, s in zip(complete(prompts, answers), short(prompts, answers))]


# The criteria as the app and the bench name them: {criterion: judge}.
CRITERIA = {"complete": complete, "short": short}
