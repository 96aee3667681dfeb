"""A project's answer length fitted to its base model's own answers.

Cut answers cost twice: people rank answers that stop mid-sentence, and the policy learns on them. A fixed
default (128 tokens for chat) cut 93% of one team's answers. `fit_answer_tokens` lets the base model answer a
sample of the project's prompts once, with room to spare (`FIT_CAP`), and sets the answer length to the
smallest multiple of `ROUND_TO` tokens within which `FIT_SHARE` of those answers end on their own (their EOS).

A new chat project gets it without asking: `fit_new_project` runs after its first prompts are imported (the CLI's
`projects create --prompts`, `prompts import`, the Data tab's import), while its length is still the format's
default (`answer_tokens_origin` ''), and is never fatal: a model that does not load leaves the default and says
so. Where the length came from is stored beside it, in words, and shown with it.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

import sqlite_utils

from labeler.errors import InputError
from labeler.services.serving.generation import prompt_messages
from labeler.services.data.projects import MAX_ANSWER_TOKENS, Project, get_project, update_project
from rlhf.configs import GenerationSettings

FIT_SHARE = 0.9  # the share of answers that must end within the length
FIT_CAP = 512  # the longest length fitted: an answer that needs more is a document, not an answer
AUTO_FIT_CAP = 256  # the cap of the fit that runs by itself at import: 16 answers to 512 tokens kept a 2-core
# machine busy for many minutes before the project could be used, and every later generation and PPO step costs
# ~4x at 512 what it costs at 128. Asked for (`projects fit-length --cap`, Refit), the fit goes to FIT_CAP.
FIT_SAMPLE = 16  # prompts answered to fit it: enough for a 90th percentile. At 135M on a CPU it took 24 min on
# a loaded 2-core machine (~0.4 core), half the answers running to the cap (bench/tasks/concise, 2026-12-06)
ROUND_TO = 16


@dataclass(frozen=True)
class FittedLength:
    tokens: int  # the length set
    finished_share: float  # share of the sampled answers that end within it
    answers: int  # answers sampled
    cap: int  # the length they were generated with

    @property
    def origin(self) -> str:
        """Where the length came from, as the project stores and shows it."""
        within = f"{self.finished_share:.0%} end within {self.tokens} tokens"
        if self.tokens >= self.cap and self.finished_share < FIT_SHARE:
            within += ", the cap (the longer ones are cut)"
        return f"fitted from {self.answers} of the base model's answers: {within}"


@dataclass(frozen=True)
class FitOutcome:
    message: str  # what happened, for the CLI's output and the Data tab
    fitted: FittedLength | None = None  # None: not fitted (not needed, or the model did not load)


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
    # One batch for the default sample: a batch lasts as long as its longest answer, so two batches of 8 cost two
    # runs to the cap where one of 16 costs one (a step of 16 is not twice a step of 8 while reading the weights
    # dominates, as for a small model on a CPU; not measured here).
    settings = GenerationSettings(max_new_tokens=cap, seed=seed, batch_size=max(1, min(len(ids), FIT_SAMPLE)))
    answers = generate_batch(model, tokenizer, ids, settings)
    eos = set(eos_token_ids(model, tokenizer))
    lengths = [len(tokens) for tokens in answers]
    finished = [len(tokens) > 0 and int(tokens[-1]) in eos for tokens in answers]
    tokens = length_for_share(lengths, finished, share, cap)
    within = sum(1 for length, done in zip(lengths, finished) if done and length <= tokens) / len(lengths)
    fitted = FittedLength(tokens=tokens, finished_share=within, answers=len(lengths), cap=cap)
    update_project(db, project, answer_tokens=tokens, answer_tokens_origin=fitted.origin)
    return fitted


def needs_fit(project: Project) -> bool:
    """A chat project whose answer length is still the format's default: never fitted, never set by a person
    (a continuation's default is the movie task's, which its own task sets)."""
    return project.prompt_format == "chat" and not project.answer_tokens_origin


def fit_new_project(db: sqlite_utils.Database, project: str, loader: Callable[[], tuple], *, refit: bool = False,
                    **fit_options) -> FitOutcome:
    """The answer length fitted (fit_answer_tokens) when the project needs_fit (or `refit`: whatever it was) and
    has training prompts; else, or when fitting fails (a model that does not load, out of memory), the length as
    it is, with why in the message. Never raises for the fit itself: the prompts are in, and a default length only
    costs cut answers."""
    current = get_project(db, project)
    if not refit and not needs_fit(current):
        return FitOutcome("")
    if not db.execute("SELECT 1 FROM prompts WHERE project_id = ? AND split = 'train' LIMIT 1",
                      [current.id]).fetchone():
        return FitOutcome("the project has no training prompts yet: import prompts first, then fit the answer length"
                          if refit else "")
    try:
        fitted = fit_answer_tokens(db, project, loader, **fit_options)
    except Exception as error:  # noqa: BLE001 -- whatever stops the model, the import stands and the length stays
        reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
        return FitOutcome(f"answer length: kept {current.answer_tokens} tokens ({current.answer_length_origin}): the "
                          f"base model's answers could not be sampled ({reason}); fit it later with `rlhf-studio "
                          f"projects fit-length {project}` or the Data tab's Refit button")
    return FitOutcome(f"answer length {fitted.tokens} tokens, {fitted.origin}", fitted)
