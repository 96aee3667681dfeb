"""Arena: two models answer one prompt, a user votes blind, the vote becomes a preference label.

start_battle puts the two models in a random order (A and B) and stores both answers as responses;
nothing the voter sees names a model. vote stores the winner on the battle row and, in the same
transaction, a ranking item with the voter's ranking (winner first; a tie or both_bad is one tied group,
which exports no preference pair), so arena votes train reward models and DPO like any other ranking.
The model names are revealed only in vote's result.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import random
from dataclasses import dataclass
from typing import Callable, Iterator

import sqlite_utils

from labeler.services.data import label_kinds, labeling, prompts
from labeler.services.data.accounts import require_user
from labeler.services.serving.chat import ModelCache, check_length, reply
from labeler.errors import InputError, PermissionDenied
from labeler.services.serving.models import chat_model_names, resolve_chat_model
from labeler.services.data.projects import get_project
from labeler.services.data.prompts import TYPED_SPLIT, PromptRecord, insert_prompt
from labeler.services.data.responses import insert_response
from rlhf.configs import GenerationSettings
from storage import write_transaction

WINNERS = ("a", "b", "tie", "both_bad")
# Torch threads for a battle's generation on CPU (with torch's default a battle took 80 s). One answer is decoded a
# token at a time at batch 1, work too small to share between threads: on the 2-core machine, with the server and
# a training run beside it, 64 greedy tokens of the default 135M model took 31-51 s with torch's 2 threads and
# 5.8-7.7 s with 1 (same text; CPU time 16-17 s vs 2.7 s), as the threads wait on each other at every op.
ARENA_CPU_THREADS = 1


@contextlib.contextmanager
def cpu_threads(n: int) -> Iterator[None]:
    """Torch's intra-op threads set to `n` inside the block, as they were after it. (Process-wide: another
    request generating meanwhile runs with `n` too, which changes its speed, never its result.)"""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
ARENA_SETTINGS = GenerationSettings(max_new_tokens=128, temperature=0.7, top_p=0.9, batch_size=1)


@dataclass(frozen=True)
class Battle:
    """What the voter may see before voting: no model names."""

    id: int
    prompt: str
    answer_a: str
    answer_b: str

    @property
    def identical(self) -> bool:
        """Both answers are the same text (up to surrounding whitespace): nothing to choose between, so the
        voter is told (a tie is the honest vote; a forced A or B would be noise in the preference data)."""
        return self.answer_a.strip() == self.answer_b.strip()


MIN_MODELS = 2


def battle_models(db: sqlite_utils.Database, server_models: tuple[str, ...] = ()) -> list[str]:
    """The models a battle can pick from: registered chat models and the server's own (`serve --model`)."""
    names = chat_model_names(db)
    return names + [name for name in server_models if name not in names]


def not_ready_reason(db: sqlite_utils.Database, server_models: tuple[str, ...] = ()) -> str | None:
    """Why the arena cannot battle yet (fewer than two models to compare), or None when it can.

    A fresh install has only the embedded 'default' model: a battle needs a second one, registered by an
    admin (Admin > Models, `rlhf-studio models add`) or by a finished SFT, DPO or PPO run.
    """
    names = battle_models(db, server_models)
    if len(names) >= MIN_MODELS:
        return None
    have = ", ".join(f"'{n}'" for n in names) or "none"
    return (
        f"The arena compares two models, and only one is registered ({have}). Train a policy in the Train tab "
        "(SFT, DPO or PPO register their model when they finish), or ask an admin to register one in "
        "Admin > Models (or `rlhf-studio models add`)."
    )


@dataclass(frozen=True)
class VoteResult:
    battle_id: int
    winner: str
    model_a: str
    model_b: str
    ranking_id: int


def random_prompt(db: sqlite_utils.Database, project: str, rng: random.Random) -> str:
    """A training prompt of the project (split 'train'), picked with the caller's generator. InputError if there
    are none."""
    # Not one another annotator typed in Chat or Arena (unreviewed: prompts.TYPED_SPLIT), nor a held-out one
    # (split 'test'): those are for judging runs, and a vote on one would leak it into a dataset.
    texts = prompts.split_texts(db, get_project(db, project).id, "train")
    if not texts:
        raise InputError(f"project '{project}' has no prompts yet; import some or type one", field="prompt")
    return rng.choice(texts)


def start_battle(
    db: sqlite_utils.Database,
    cache: ModelCache,
    project: str,
    username: str,
    prompt: str,
    model_a: str,
    model_b: str,
    settings: GenerationSettings = ARENA_SETTINGS,
    rng: random.Random | None = None,
    server_models: tuple[str, ...] = (),
    budget_s: float | None = None,
    notify: Callable[[str], None] | None = None,
) -> Battle:
    """Generate both answers and store the battle. The models' order is shuffled with `rng`.

    Both models must be registered chat models (or one of `server_models`, chosen on the command line):
    a battle never opens a path or a hub id typed by a user. A web request passes `budget_s`: each answer is
    bounded like a chat's (chat.request_bounds, half the budget each: each stops after half of it), `notify` told
    when its length was capped, its place while it waits, and the rest stream_reply tells; one battle (or chat or
    best-of-N answer) per user at a time, in the server's queue (the cache's turns).
    """
    proj = get_project(db, project)
    user = require_user(db, username)
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("is empty", field="prompt")
    check_length(prompt, "prompt")
    if model_a == model_b:
        raise InputError("pick two different models", field="model_b")
    paths = {name: resolve_chat_model(db, name, server_models) for name in (model_a, model_b)}
    rng = rng or random.Random()
    first, second = (model_a, model_b) if rng.random() < 0.5 else (model_b, model_a)
    history = [{"role": "user", "content": prompt}]
    # One seed for both answers: the models differ, the luck does not.
    settings = dataclasses.replace(settings, seed=rng.randrange(2**31))
    # The project's prompt format, as generation uses it (chat template, or plain text to continue).
    each = None if budget_s is None else budget_s / 2
    with cache.turns.turn(username, waiting=notify), cpu_threads(ARENA_CPU_THREADS):
        answers = {name: reply(cache, paths[name], history, None, settings, chat_template=proj.chat_template,
                               budget_s=each, notify=notify)
                   for name in (first, second)}
    settings_json = json.dumps(dataclasses.asdict(settings), sort_keys=True)
    with write_transaction(db):
        prompt_id, _ = insert_prompt(db, proj.id, PromptRecord(prompt, None), "arena", split=TYPED_SPLIT)
        # Both answers were generated just above, by this server: marked for exports.
        response_ids = [
            insert_response(db, prompt_id, answers[name], model=name, source="arena", settings_json=settings_json,
                            server_generated=True)
            for name in (first, second)
        ]
        battle_id = db.execute(
            "INSERT INTO battles (project_id, prompt_id, model_a, model_b, response_a, response_b, user_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [proj.id, prompt_id, first, second, *response_ids, user.id],
        ).lastrowid
    return Battle(battle_id, prompt, answers[first], answers[second])


def voted_battles(db: sqlite_utils.Database, project_id: int) -> list[tuple[str, str, str]]:
    """(model_a, model_b, winner) of every voted battle of the project, oldest vote first."""
    rows = db.execute(
        "SELECT model_a, model_b, winner FROM battles WHERE project_id = ? AND winner IS NOT NULL ORDER BY voted_at, id",
        [project_id],
    )
    return [(row[0], row[1], row[2]) for row in rows]


def vote(db: sqlite_utils.Database, battle_id: int, username: str, winner: str) -> VoteResult:
    """Record the vote of the user who started the battle, once; returns the revealed model names.

    Voting again with the same winner returns the stored result (a double click); a different winner
    is refused.
    """
    if winner not in WINNERS:
        raise InputError(f"must be one of {', '.join(WINNERS)}, got {winner!r}", field="winner")
    with write_transaction(db):
        user = require_user(db, username)
        battle = db.execute("SELECT * FROM battles WHERE id = ?", [battle_id]).fetchone()
        if battle is None:
            raise InputError(f"no battle {battle_id!r}", field="battle_id")
        if battle["user_id"] != user.id:
            raise PermissionDenied(f"battle {battle_id} belongs to another user")
        if battle["winner"] is not None:
            if battle["winner"] != winner:
                raise InputError(f"battle {battle_id} already has a vote ({battle['winner']})", field="winner")
            return VoteResult(battle_id, winner, battle["model_a"], battle["model_b"], battle["ranking_id"])
        ids = [battle["response_a"], battle["response_b"]]
        order = label_kinds.vote_to_order(winner, *ids)
        item_id = labeling.insert_item(db, battle["project_id"], "ranking", battle["prompt_id"], ids)
        # Done by the voter: the item counts as labelled by them, like a ranking from the queue.
        labeling.add_assignment(db, item_id, user.id, "done")
        ranking_id = labeling.insert_ranking(db, item_id, battle["prompt_id"], user.id, json.dumps(order),
                                             source="arena")
        db.execute(
            "UPDATE battles SET winner = ?, ranking_id = ?, voted_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?",
            [winner, ranking_id, battle_id],
        )
    return VoteResult(battle_id, winner, battle["model_a"], battle["model_b"], ranking_id)
