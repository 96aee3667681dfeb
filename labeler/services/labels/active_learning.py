"""Active selection: the queue asks people about what teaches the reward model most.

A project with `selection = 'uncertainty'` keeps a preference ensemble (rlhf.preference_ensemble) fitted on all
of its labels. `refresh_selection` refits it and scores the open items: a ranking item by how much its answers'
order is still undecided between the ensemble's members (BALD information), a rating item by how much the
members disagree on its answer's score. It writes `items.selection_score` (the queue serves the highest first)
and `items.selection_reason` (what an admin sees). One item in every 1/RANDOM_SHARE is drawn at random instead,
so agreement and accuracy measured on served items stay unbiased estimates for the whole pool.

`SelectionRefresher` runs refresh_selection in a background thread of `serve` whenever a project with
uncertainty selection has `REFIT_EVERY` new labels; `rlhf-studio projects rescore NAME` runs it once.
"""
from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field
from typing import Sequence

import sqlite_utils

from labeler.services.data import labeling
from labeler.services.labels.export import ExportOptions, preference_rows
from labeler.services.data.projects import Project, get_project, list_projects
from labeler.services.data.responses import response_texts
from storage import open_db, write_transaction

RANDOM_SHARE = 0.25  # every 4th item served is a random one
REFIT_EVERY = 10  # labels between two refits in the background
MAX_CANDIDATES = 2000  # open items scored per refresh (the oldest; the rest keep arrival order after them)


def _prompt_text(prompt) -> str:
    """A preference row's prompt as text: itself, or the last user message of a conversation."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    return str(users[-1] if users else prompt)


def _answer_text(answer) -> str:
    if isinstance(answer, str):
        return answer
    return str(answer[-1].get("content", "")) if answer and isinstance(answer[-1], dict) else str(answer)


def preference_texts(db: sqlite_utils.Database, project: str) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) texts of every preference the project's labels imply: rankings, and pairs of
    rated answers to one prompt (the export's majority rules decide contested pairs)."""
    rows = preference_rows(db, project, ExportOptions(include_rating_pairs=True))
    return [(_prompt_text(r["prompt"]), _answer_text(r["chosen"]), _answer_text(r["rejected"])) for r in rows]


def fit_ensemble(encoder, pairs: Sequence[tuple[str, str, str]], members: int = 8, seed: int = 0, init=None):
    """A PreferenceEnsemble fitted on (prompt, chosen, rejected) texts."""
    from rlhf.preference_ensemble import PreferenceEnsemble  # imports torch

    ensemble = PreferenceEnsemble(encoder.dim, members=members, seed=seed, init=init)
    if pairs:
        prompts = [p for p, _, _ in pairs]
        ensemble.fit(encoder.embed(prompts, [c for _, c, _ in pairs]), encoder.embed(prompts, [r for _, _, r in pairs]))
    return ensemble


@dataclass(frozen=True)
class OpenItem:
    item_id: int
    kind: str
    prompt: str
    answers: list[str]


def open_items(db: sqlite_utils.Database, project_id: int, limit: int = MAX_CANDIDATES) -> list[OpenItem]:
    """The oldest open items that are not gold and no run waits for, with their texts."""
    rows = labeling.selectable_items(db, project_id, limit)
    texts = response_texts(db, {r for _, _, _, ids in rows for r in ids})
    return [OpenItem(item_id, kind, prompt, [texts[r] for r in ids if r in texts]) for item_id, kind, prompt, ids in rows]


def item_information(ensemble, encoder, items: Sequence[OpenItem]) -> list[float]:
    """How much labelling each item would teach the ensemble: BALD information of a ranking item's order; for a
    rating item (one answer), the members' spread of its score."""
    from rlhf.preference_ensemble import preference_information  # imports torch

    prompts = [item.prompt for item in items for _ in item.answers]
    features = encoder.embed(prompts, [a for item in items for a in item.answers])
    scores = ensemble.scores(features)  # (members, answers)
    out, start = [], 0
    for item in items:
        group = scores[:, start : start + len(item.answers)]
        start += len(item.answers)
        if item.kind == "ranking":
            out.append(preference_information(group))
        else:
            out.append(float(group.std(0).mean()) if len(item.answers) else 0.0)
    return out


def order_with_random_share(item_ids: Sequence[int], information: Sequence[float], share: float,
                            rng: random.Random) -> list[tuple[int, float, str]]:
    """The serving order: the most informative first, with every round(1/share)-th place given to an item drawn
    at random from the rest. Returns (item id, selection_score, reason) with scores decreasing along the order.
    Ties in information keep the items' arrival order (ids ascending)."""
    if not 0 < share <= 1:
        raise ValueError(f"share={share}: must be in (0, 1]")
    by_information = sorted(zip(item_ids, information), key=lambda pair: (-pair[1], pair[0]))
    info_of = dict(by_information)
    remaining = [item_id for item_id, _ in by_information]
    every = max(1, round(1 / share))
    order: list[tuple[int, str]] = []
    while remaining:
        if (len(order) + 1) % every == 0:
            item_id = remaining.pop(rng.randrange(len(remaining)))
            order.append((item_id, f"random pick ({share:.0%} of the queue is random, so accuracy figures stay unbiased)"))
        else:
            item_id = remaining.pop(0)
            order.append((item_id, f"the reward model is unsure of it: information {info_of[item_id]:.3f}"))
    total = len(order)
    return [(item_id, float(total - position), reason) for position, (item_id, reason) in enumerate(order)]


@dataclass
class SelectionReport:
    project: str
    labels: int
    pairs: int
    items_scored: int


def refresh_selection(db: sqlite_utils.Database, project: str, encoder, seed: int = 0) -> SelectionReport:
    """Refit the project's ensemble on all its labels and rewrite the open items' selection scores and reasons
    (one transaction). Runs whatever the project's selection setting; the queue reads the scores only under
    'uncertainty'."""
    proj = get_project(db, project)
    labels = labeling.label_count(db, proj.id)
    pairs = preference_texts(db, project)
    ensemble = fit_ensemble(encoder, pairs, seed=seed)
    items = [item for item in open_items(db, proj.id) if item.answers]
    information = item_information(ensemble, encoder, items) if items else []
    # One order per kind: each queue serves one kind, and the two measures (BALD nats, score spread) are on
    # different scales. Ordered together, the rating items' larger spreads took the informative places and the
    # ranking queue got mostly the random picks (a label-efficiency run served 3 random items in 4).
    order = []
    for kind in sorted({item.kind for item in items}):
        of_kind = [(item.item_id, info) for item, info in zip(items, information) if item.kind == kind]
        order += order_with_random_share([i for i, _ in of_kind], [v for _, v in of_kind], RANDOM_SHARE,
                                         random.Random(f"{proj.id}:{kind}:{labels}:{seed}"))
    with write_transaction(db):
        labeling.set_selection_order(db, proj.id, order)
    return SelectionReport(project, labels, len(pairs), len(order))


@dataclass
class SelectionRefresher:
    """A daemon thread of the server: refreshes the selection of every project whose setting is 'uncertainty'
    once it has `every` new labels since the last refresh. Its own database connection; failures are logged and
    retried at the next tick, never raised into the server."""

    db_path: str
    every: int = REFIT_EVERY
    interval: float = 2.0
    encoder_name: str = "default-encoder"
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _done_at: dict = field(default_factory=dict, init=False, repr=False)  # project -> label count at last refresh
    _encoder: object = field(default=None, init=False, repr=False)
    thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> "SelectionRefresher":
        self.thread = threading.Thread(target=self._loop, name="selection-refresher", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def due(self, project: Project, labels: int) -> bool:
        last = self._done_at.get(project.name)
        return project.selection == "uncertainty" and (last is None or labels - last >= self.every)

    def tick(self, db) -> list[SelectionReport]:
        reports = []
        for project in list_projects(db):
            labels = labeling.label_count(db, project.id)
            if self.due(project, labels):
                if self._encoder is None:
                    from rlhf.preference_ensemble import FrozenTextEncoder  # torch

                    self._encoder = FrozenTextEncoder(self.encoder_name)
                reports.append(refresh_selection(db, project.name, self._encoder))
                self._done_at[project.name] = labels
        return reports

    def _loop(self) -> None:
        db = open_db(self.db_path)
        while not self._stop.wait(self.interval):
            try:
                self.tick(db)
            except Exception as error:  # a bad refresh must not take the server down; the next tick retries
                logging.getLogger(__name__).warning("selection refresh failed: %s", error)
