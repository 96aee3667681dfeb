"""The app side of HumanReward: PPO rollouts go into the labelling queue, labels come back as rewards.

Each rollout becomes a prompt (deduplicated), a response tagged with the run, and a rating item with high
priority, so annotators get it before anything else (and the Rate tab shows "a training run waits for N
ratings"). `request_and_wait` blocks until every rollout has a rating or the timeout passes; the mean of a
rollout's ratings maps to a reward centred on the middle of the project's Likert scale:

    reward = (mean_score - (min + max) / 2) / ((max - min) / 2)      in [-1, 1]
    e.g. scale 1..7: 7 -> +1, 5 -> +1/3, 4 -> 0, 1 -> -1

With `label_kind="ranking"` each prompt's group of answers (consecutive rollouts with the same query: RLOO's
answers_per_prompt) becomes one Rank item instead of one Rate item per answer: one read of the prompt, one label,
and the order is all a group estimator needs. A ranking maps to centred ranks within the group (best +1, worst
-1, ties equal; label_kinds.centred_rank_rewards), averaged over the rankings when several people rank it.

Timeout policies: "skip" returns None for unrated rollouts (dropped from the step), "wait" keeps waiting (one
more timeout at a time, until rated or the run is asked to stop), "rm" returns None so a MixReward or the
runner fills them in with the reward model. Rollouts no longer waited for drop to priority 0: they stay
labellable, they just stop jumping the queue.

Overlap (the job's `human_overlap`): the runner queues a batch with `request_ahead` as soon as it is generated,
so people rate it while the trainer waits for, and steps on, the batch before; `request_and_wait` on the same
rollouts then waits for those items instead of queuing them twice.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from labeler.services.data.label_kinds import centred_rank_rewards
from labeler.services.data.labeling import (MAX_RANKING_SIZE, MIN_RANKING_SIZE, insert_item, item_response_ids,
                                            ranking_orders, rating_means, release_items, unreleased_run_items)
from labeler.services.data.projects import get_project
from labeler.services.data.prompts import PromptRecord, insert_prompt
from labeler.services.data.responses import insert_response, response_texts
from storage import open_db, write_transaction

PPO_PRIORITY = 100


def rating_to_reward(score: float, likert_min: float, likert_max: float) -> float:
    mid = (likert_min + likert_max) / 2
    return (score - mid) / ((likert_max - likert_min) / 2)


@dataclass
class HumanRewardQueue:
    db_path: str
    project: str
    run_id: int
    policy: str = "skip"  # skip | wait | rm
    model_name: str = ""
    poll_seconds: float = 0.5
    min_ratings: int = 1
    should_stop: Callable[[], bool] = lambda: False
    label_kind: str = "rating"  # rating: one Rate item per rollout; ranking: one Rank item per prompt's group
    group_size: int | None = None  # ranking: answers per prompt in a batch (None: runs of the same query)
    # Batches queued by request_ahead and not yet waited for, oldest first: (queries, responses, item ids).
    ahead: deque = field(default_factory=deque, init=False, repr=False)

    def __post_init__(self):
        if self.policy not in ("skip", "wait", "rm"):
            raise ValueError(f"timeout_policy={self.policy!r}: one of skip, wait, rm")
        if self.label_kind not in ("rating", "ranking"):
            raise ValueError(f"label_kind={self.label_kind!r}: one of rating, ranking")
        self.db = open_db(self.db_path)  # this object lives in the worker's main thread

    def request(self, queries: list[str], responses: list[str]) -> list[int]:
        """Queue the rollouts (one transaction); returns the item ids: one per rollout (rating), or one per group of
        consecutive rollouts with the same query (ranking), in rollout order."""
        project = get_project(self.db, self.project)
        groups = self.groups(queries)
        item_ids = []
        with write_transaction(self.db):
            for group in groups:
                prompt_id, _ = insert_prompt(self.db, project.id, PromptRecord(queries[group[0]], None),
                                             f"ppo-run{self.run_id}")
                response_ids = [insert_response(self.db, prompt_id, responses[i], source="ppo", run_id=self.run_id,
                                                model=self.model_name or f"ppo-run{self.run_id}") for i in group]
                item_ids.append(insert_item(self.db, project.id, self.label_kind, prompt_id, response_ids,
                                            priority=PPO_PRIORITY, run_id=self.run_id))
        return item_ids

    def groups(self, queries: list[str]) -> list[list[int]]:
        """Rollout indices per item: one each (rating), or each prompt's group (ranking)."""
        if self.label_kind == "ranking":
            return group_rollouts(queries, self.group_size)
        return [[i] for i in range(len(queries))]

    def collect(self, item_ids: list[int]) -> list[float | None]:
        """Current rewards, one per rollout of the items (in rollout order): the mapped mean rating, or the mean
        centred rank over the item's rankings; None while an item has fewer than min_ratings labels."""
        if self.label_kind == "ranking":
            return self._collect_rankings(item_ids)
        project = get_project(self.db, self.project)
        by_item = rating_means(self.db, item_ids)
        out: list[float | None] = []
        for item_id in item_ids:
            mean, n = by_item.get(item_id, (None, 0))
            out.append(None if n < self.min_ratings else rating_to_reward(mean, project.likert_min, project.likert_max))
        return out

    def _collect_rankings(self, item_ids: list[int]) -> list[float | None]:
        members = item_response_ids(self.db, item_ids)
        orders = ranking_orders(self.db, item_ids)
        out: list[float | None] = []
        for item_id in item_ids:
            # Response ids were inserted in rollout order, so the item's sorted ids are its rollouts' order.
            ranked = orders.get(item_id, [])
            if len(ranked) < self.min_ratings:
                out += [None] * len(members[item_id])
                continue
            per_ranking = [centred_rank_rewards(order) for order in ranked]
            out += [sum(r[response_id] for r in per_ranking) / len(per_ranking) for response_id in members[item_id]]
        return out

    def wait(self, item_ids: list[int], timeout: float) -> list[float | None]:
        deadline = time.monotonic() + timeout
        while True:
            rewards = self.collect(item_ids)
            if all(r is not None for r in rewards) or self.should_stop():
                break
            if time.monotonic() >= deadline:
                if self.policy != "wait":
                    break
                deadline = time.monotonic() + timeout  # "wait again": another full timeout
            time.sleep(self.poll_seconds)
        self.release(item_ids)
        return rewards

    def pending(self) -> list[tuple[int, str, list[str]]]:
        """The run's items still waited for (queued, not yet released), oldest first: (item id, prompt text, the
        answers in rollout order). A resumed worker waits for these instead of asking people again."""
        out = []
        for item_id, prompt, ids in unreleased_run_items(self.db, self.run_id):
            texts = response_texts(self.db, ids)
            out.append((item_id, prompt, [texts[i] for i in ids if i in texts]))
        return out

    def release(self, item_ids: list[int]) -> None:
        """The run no longer waits for these items: back to normal priority."""
        with write_transaction(self.db):
            release_items(self.db, item_ids)

    def request_ahead(self, queries: list[str], responses: list[str]) -> list[int]:
        """Queue rollouts now and wait for them later: the next request_and_wait with the same rollouts (in
        queue order) waits for these items."""
        item_ids = self.request(queries, responses)
        self.ahead.append((list(queries), list(responses), item_ids))
        return item_ids

    def release_ahead(self) -> None:
        """The run ends: batches queued ahead and never waited for stop jumping the queue."""
        while self.ahead:
            self.release(self.ahead.popleft()[2])

    def request_and_wait(self, queries: list[str], responses: list[str], timeout: float) -> list[float | None]:
        """HumanReward's callable; rollouts already queued by request_ahead are not queued again."""
        if self.ahead and self.ahead[0][:2] == (list(queries), list(responses)):
            item_ids = self.ahead.popleft()[2]
        else:
            item_ids = self.request(queries, responses)
        return self.wait(item_ids, timeout)


def same_prompt_runs(queries: Sequence[str], group_size: int | None = None) -> list[list[int]]:
    """Indices of consecutive rollouts with the same query (each prompt's answers in a PPO batch), cut into chunks
    of at most `group_size`; no check of the sizes."""
    groups: list[list[int]] = []
    for index, query in enumerate(queries):
        if groups and queries[groups[-1][0]] == query and (group_size is None or len(groups[-1]) < group_size):
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def group_rollouts(queries: list[str], group_size: int | None = None) -> list[list[int]]:
    """Each prompt's group of answers (one Rank item each): consecutive chunks of `group_size` rollouts, or, without
    it, runs of consecutive rollouts with the same query. ValueError when a group cannot be one ranking (fewer than
    2 or more than MAX_RANKING_SIZE answers, or a chunk mixing queries)."""
    groups = same_prompt_runs(queries, group_size)
    if group_size is not None and any(len(group) != group_size for group in groups):
        raise ValueError(f"rollouts come in groups of {group_size} answers to one prompt (answers_per_prompt); "
                         f"got groups of {sorted({len(g) for g in groups})}")
    for group in groups:
        if not MIN_RANKING_SIZE <= len(group) <= MAX_RANKING_SIZE:
            raise ValueError(f"a prompt has {len(group)} answers in this batch: a ranking needs "
                             f"{MIN_RANKING_SIZE}..{MAX_RANKING_SIZE} (answers_per_prompt)")
    return groups
