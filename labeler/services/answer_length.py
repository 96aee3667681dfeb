"""A project's answer length fitted to its base model's own answers.

Cut answers cost twice: people rank answers that stop mid-sentence, and the policy learns on them. A fixed
default (128 tokens for chat) cut 93% of one team's answers. `fit_answer_tokens` lets the base model answer a
sample of the project's prompts once, with room to spare (`FIT_CAP`), and sets the answer length to the
smallest multiple of `ROUND_TO` tokens within which `FIT_SHARE` of those answers end on their own (their EOS).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

import sqlite_utils

from labeler.services.errors import InputError
from labeler.services.generation import prompt_messages
from labeler.services.projects import MAX_ANSWER_TOKENS, get_project, update_project
from rlhf.configs import GenerationSettings

FIT_SHARE = 0.9  # the share of answers that must end within the length
FIT_CAP = 512  # the longest length fitted: an answer that needs more is a document, not an answer
FIT_SAMPLE = 16  # prompts answered to fit it: enough for a 90th percentile, a minute of CPU at 135M
ROUND_TO = 16


@dataclass(frozen=True)
class FittedLength:
    tokens: int  # the length set
    finished_share: float  # share of the sampled answers that end within it
    answers: int  # answers sampled
    cap: int  # the length they were generated with


def length_for_share(lengths: Sequence[int], finished: Sequence[bool], share: float = FIT_SHARE,
                     cap: int = FIT_CAP, round_to: int = ROUND_TO) -> int:
    """The smallest multiple of `round_to` (at most `cap`) within which `share` of the answers end.

    An answer that ended (its EOS) after L tokens fits any length >= L; one cut at the cap fits none, so when
    fewer than `share` of the answers ended at all, the cap is the answer."""
    if len(lengths) != len(finished) or not lengths:
        raise ValueError("one length and one finished flag per answer, at least one answer")
    needed = math.ceil(share * len(lengths))
    ended = sorted(length for length, done in zip(lengths, finished) if done)
    if len(ended) < needed:
        return cap
    return min(cap, max(round_to, math.ceil(ended[needed - 1] / round_to) * round_to))


def _sample_prompts(db: sqlite_utils.Database, project_id: int, sample: int, seed: int) -> list:
    rows = db.execute("SELECT id, text, messages_json FROM prompts WHERE project_id = ? AND split = 'train'"
                      " ORDER BY id", [project_id]).fetchall()
    if not rows:
        raise InputError("the project has no training prompts yet: import prompts first, then fit the answer length",
                         field="answer_tokens")
    chosen = random.Random(seed).sample(rows, min(sample, len(rows)))
    return [prompt_messages(row) for row in chosen]


def fit_answer_tokens(db: sqlite_utils.Database, project: str, loader: Callable[[], tuple], *,
                      sample: int = FIT_SAMPLE, cap: int = FIT_CAP, share: float = FIT_SHARE,
                      seed: int = 0) -> FittedLength:
    """Answer `sample` of the project's training prompts with the base model (`loader() -> (model, tokenizer)`),
    sampled as generation samples, and set the project's answer length to what `share` of them need."""
    if not 1 <= cap <= MAX_ANSWER_TOKENS:
        raise InputError(f"must be 1 to {MAX_ANSWER_TOKENS} tokens, got {cap}", field="cap")
    proj = get_project(db, project)
    prompts = _sample_prompts(db, proj.id, sample, seed)

    from rlhf.generation import build_prompt_ids, eos_token_ids, generate_batch  # imports torch

    model, tokenizer = loader()
    ids = [build_prompt_ids(tokenizer, prompt, use_chat_template=proj.chat_template) for prompt in prompts]
    answers = generate_batch(model, tokenizer, ids, GenerationSettings(max_new_tokens=cap, seed=seed, batch_size=8))
    eos = set(eos_token_ids(model, tokenizer))
    lengths = [len(tokens) for tokens in answers]
    finished = [len(tokens) > 0 and int(tokens[-1]) in eos for tokens in answers]
    tokens = length_for_share(lengths, finished, share, cap)
    update_project(db, project, answer_tokens=tokens)
    within = sum(1 for length, done in zip(lengths, finished) if done and length <= tokens) / len(lengths)
    return FittedLength(tokens=tokens, finished_share=within, answers=len(lengths), cap=cap)
