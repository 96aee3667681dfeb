"""Concise and complete: the judge of a support team that wants short answers that still answer the question.

    score = min(1, words / MIN_WORDS) * (0.4 * coverage + 0.2 * finished + 0.2 * within_budget + 0.2 * (1 - repeated))

- coverage: share of the question's key terms (its words less STOPWORDS, crudely stemmed) that the answer uses;
- finished: 1 if the answer ends on a finished sentence (. ! or ?, before closing quotes or brackets), else 0,
  so an answer cut at the token limit loses it;
- within_budget: 1 up to WORD_BUDGET words, then falling linearly to 0 at twice the budget;
- repeated: the share of the answer's word bigrams that repeat an earlier one (a loop scores near 1);
- the factor in front scales down answers shorter than MIN_WORDS (a bare "Yes." answers nothing).

Scores lie in [0, 1]; an empty answer scores 0. Pure and deterministic: the same text always gets the same score.
"""
from __future__ import annotations

from typing import Sequence

from bench.tasks.text import check_lengths, prompt_text, words

WORD_BUDGET = 60
MIN_WORDS = 8
WEIGHTS = {"coverage": 0.4, "finished": 0.2, "within_budget": 0.2, "not_repeated": 0.2}
FINISHED_ENDINGS = (".", "!", "?")
CLOSERS = "\"')]*»”’"
STOPWORDS = frozenset("""
a an the and or but if of to in on at by for from with without into onto over under about after before during
how what why when where who whom which whose can could would should will shall may might must do does did done
is are was were be been being have has had i me my mine we our ours you your yours he she it its they them their
this that these those there here than then so not no yes any some all each every own same other more most very
just also too get got make way ways please want need like one two use using still again
""".split())


def stem(word: str) -> str:
    """A crude suffix strip, enough that 'passwords'/'password' and 'charging'/'charge' match."""
    word = word.lower()
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def key_terms(question: str) -> set[str]:
    return {stem(w) for w in words(question) if w.lower() not in STOPWORDS and len(w) >= 3}


def coverage(question: str, answer: str) -> float:
    keys = key_terms(question)
    if not keys:
        return 1.0
    used = {stem(w) for w in words(answer)}
    return len(keys & used) / len(keys)


def finished(answer: str) -> float:
    return 1.0 if answer.strip().rstrip(CLOSERS).endswith(FINISHED_ENDINGS) else 0.0


def within_budget(n_words: int, budget: int = WORD_BUDGET) -> float:
    return 1.0 if n_words <= budget else max(0.0, 1.0 - (n_words - budget) / budget)


def repeated_share(answer: str) -> float:
    tokens = [w.lower() for w in words(answer)]
    bigrams = list(zip(tokens, tokens[1:]))
    return 1.0 - len(set(bigrams)) / len(bigrams) if bigrams else 0.0


def score(prompt, answer: str) -> float:
    n = len(words(answer))
    if n == 0:
        return 0.0
    parts = {"coverage": coverage(prompt_text(prompt), answer), "finished": finished(answer),
             "within_budget": within_budget(n), "not_repeated": 1.0 - repeated_share(answer)}
    return min(1.0, n / MIN_WORDS) * sum(WEIGHTS[k] * v for k, v in parts.items())


def judge(prompts: Sequence, answers: Sequence[str]) -> list[float]:
    """One score in [0, 1] per answer (the app's reward-function signature: prompts, answers)."""
    check_lengths(prompts, answers)
    return [score(p, a) for p, a in zip(prompts, answers)]
