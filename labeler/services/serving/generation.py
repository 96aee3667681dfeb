"""Generate responses to a project's prompts, store them, and queue them for labelling.

The model is loaded once per call through the one inference loader (inference.load_policy: the model's precision,
on the GPU when there is one), or taken from the caller's `loader` (the Data tab passes the server's ModelCache,
so a second click does not load the model again). Work is split into batches of `settings.batch_size` responses; each
batch is stored in its own transaction as soon as it is generated, so an interrupted run keeps what it
finished, and a re-run (prompt_ids=None) only tops prompts up to `n_per_prompt` responses of this model.
"""
from __future__ import annotations

import collections
import dataclasses
import json
from typing import Callable, Sequence

import sqlite_utils

from labeler.services.serving import inference
from labeler.services.data import labeling, prompts, responses
from labeler.errors import InputError
from labeler.services.serving.models import resolve
from labeler.services.data.projects import get_project
# The Data tab calls generation.last_import_prompt_ids; the prompts module owns the query.
from labeler.services.data.prompts import last_import_prompt_ids  # noqa: F401
from labeler.services.data.responses import insert_response
from rlhf.configs import GenerationSettings
from storage import write_transaction

Progress = Callable[[int, int], None]


def prompt_messages(row) -> str | list[dict]:
    """What to generate from: the stored conversation when there is one, else the prompt text."""
    return json.loads(row["messages_json"]) if row["messages_json"] else row["text"]


def _work_list(
    db: sqlite_utils.Database, project_id: int, model: str, n_per_prompt: int, prompt_ids: Sequence[int] | None,
    limit: int | None, within: Sequence[int] | None = None,
) -> list[dict]:
    """One entry per response to generate: the prompt row, repeated as many times as it needs."""
    if prompt_ids is not None:
        ids = [int(i) for i in prompt_ids]
        found = prompts.project_prompt_rows(db, project_id, ids)
        missing = [i for i in ids if i not in found]
        if missing:
            raise InputError(f"prompts {missing} are not in this project", field="prompt_ids")
        chosen = [(found[i], n_per_prompt) for i in dict.fromkeys(ids)]
    else:
        # Prompts short of n responses from this model, topped up: re-running resumes, never duplicates work.
        # Prompts typed in Chat or Arena wait for an admin's review (prompts.promote_prompts) before anyone is
        # shown answers to them, so only reviewed prompts are answered; held-out prompts (split 'test') are for
        # evaluation, not labelling (`prompt_ids` names them when an admin wants them answered).
        rows = prompts.reviewed_prompts_with_answers(db, project_id, model, include_heldout=False)
        allowed = None if within is None else {int(i) for i in within}
        chosen = [(row, n_per_prompt - row["have"]) for row in rows
                  if row["have"] < n_per_prompt and (allowed is None or row["id"] in allowed)]
    if limit is not None:
        chosen = chosen[:limit]
    return [row for row, count in chosen for _ in range(count)]


def generate_responses(
    db: sqlite_utils.Database,
    project: str = "default",
    model: str = "default",
    n_per_prompt: int = 2,
    settings: GenerationSettings | None = None,
    prompt_ids: Sequence[int] | None = None,
    limit: int | None = None,
    progress: Progress | None = None,
    within_prompt_ids: Sequence[int] | None = None,
    loader: Callable[[str], tuple] | None = None,
    ranking_size: int = 4,
) -> list[int]:
    """Generate `n_per_prompt` responses per prompt with `model` (a registry name, 'default' or a folder).

    `settings` None: GenerationSettings' defaults with the project's answer length. `limit` caps the number of
    prompts. `within_prompt_ids` tops up only those prompts (e.g. the last import
    batch); `prompt_ids` generates `n_per_prompt` more for each, whatever they have. Returns the new response
    ids, after creating their rating and ranking items (a prompt's new answers in rankings of at most
    `ranking_size`). `progress(done, total)` counts responses: (0, total) once the model is loaded, then after
    every batch. `loader(path) -> (model, tokenizer)` replaces loading.
    """
    if isinstance(n_per_prompt, bool) or not isinstance(n_per_prompt, int) or n_per_prompt < 1:
        raise InputError(f"must be a positive integer, got {n_per_prompt!r}", field="n_per_prompt")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError(f"must be a positive integer, got {limit!r}", field="limit")
    labeling.check_ranking_size(ranking_size)  # before any generation: a bad size must write nothing
    project_row = get_project(db, project)
    project_id = project_row.id
    if settings is None:  # the project's answer length, the other sampling settings at their defaults
        settings = GenerationSettings(max_new_tokens=project_row.answer_tokens)
    path = resolve(db, model)  # before any loading: an unknown name fails fast
    work = _work_list(db, project_id, model, n_per_prompt, prompt_ids, limit, within_prompt_ids)
    if not work:
        return []

    from rlhf.generation import build_prompt_ids, decode_responses, generate_batch  # imports torch

    lm, tokenizer = (loader or inference.load_policy)(path)
    if progress is not None:
        progress(0, len(work))
    # Seeds differ per batch and per run (offset by the responses already stored), so topping a prompt up
    # later never repeats an earlier sample; the seed actually used is stored with each response.
    seed_offset = responses.count_responses(db)
    response_ids: list[int] = []
    left = collections.Counter(row["id"] for row in work)  # answers still to generate, per prompt
    unqueued: list[tuple[int, int]] = []  # (response id, prompt id) not yet in items
    for start in range(0, len(work), settings.batch_size):
        batch = work[start : start + settings.batch_size]
        used = dataclasses.replace(settings, seed=settings.seed + seed_offset + start)
        # The project's prompt format, as PPO rollouts and evaluation use it: the answers people label are
        # drawn the way the policy is later trained and measured.
        ids = [build_prompt_ids(tokenizer, prompt_messages(row), use_chat_template=project_row.chat_template) for row in batch]
        texts = decode_responses(tokenizer, generate_batch(lm, tokenizer, ids, used))
        settings_json = json.dumps({**dataclasses.asdict(used), "prompt_format": project_row.prompt_format}, sort_keys=True)
        batch_ids = []
        with write_transaction(db):
            for row, text in zip(batch, texts):
                batch_ids.append(
                    insert_response(db, row["id"], text, model=model, source="generated", settings_json=settings_json)
                )
        # Queue each batch's answers for rating at once, so annotators can start while a long generation is still
        # running, and each prompt's answers for ranking once they are all there (one item, even when the prompt
        # was split across batches).
        for row, response_id in zip(batch, batch_ids):
            left[row["id"]] -= 1
            unqueued.append((response_id, row["id"]))
        labeling.create_items(db, project, batch_ids, ranking_size, kinds=("rating",))
        ready = [response_id for response_id, prompt_id in unqueued if left[prompt_id] == 0]
        if ready:
            labeling.create_items(db, project, ready, ranking_size, kinds=("ranking",))
            unqueued = [(r, p) for r, p in unqueued if left[p] > 0]
        response_ids.extend(batch_ids)
        if progress is not None:
            progress(len(response_ids), len(work))
    return response_ids

