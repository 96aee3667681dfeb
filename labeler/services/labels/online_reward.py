"""A mixed run's rewards: people judge the answer groups the reward model is least sure of, and the reward model,
which learns from every human label as it arrives, scores the rest.

Each batch (PPO's answers_per_prompt answers to each prompt, consecutive):
1. the online reward model scores every answer with each ensemble member (rlhf.preference_ensemble);
2. `human_share` of the groups go to people as one Rank item each (or Rate items): the ones whose order the members
   disagree on most (BALD information), one in four drawn at random instead (active_learning.RANDOM_SHARE), so the
   agreement figure below is measured on a fair sample too;
3. the run waits for those labels (HumanRewardQueue, with its timeout policy); a group people judged gets their
   rewards (centred ranks), every other group the model's expected centred ranks
   (rlhf.preference_ensemble.expected_centred_ranks) at the temperature that calibrates it on labels it had not
   yet seen (calibrated_temperature): the same scale as people's, only as large as the model has proved sure.
   Scores standardised over each batch instead kept the same spread however alike the answers became, and the
   run's KL grew to 22 nats by step 28 (bench/human_loop.py);
4. the model's agreement with the new labels is measured before it learns from them (an honest online accuracy),
   then it refits on all of the project's labels in a background thread once `refit_every` new labels are in; the
   next batch is scored by the newest fitted model.

Warm start: from the project's trained reward model when the job names one (its score, standardised, is one more
feature whose weight starts at 1), else from the encoder alone (every member starts at zero: no opinion).
"""
from __future__ import annotations

import math
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

import torch

from labeler.services.labels import active_learning
from labeler.services.data import labeling
from labeler.services.labels.human_reward import HumanRewardQueue, same_prompt_runs
from labeler.services.data.projects import get_project
from rlhf.preference_ensemble import (
    FrozenTextEncoder,
    PreferenceEnsemble,
    calibrated_temperature,
    expected_centred_ranks,
    preference_information,
)
from storage import open_db


CALIBRATION_PAIRS = 16  # labels the model is measured on before its scale is calibrated (until then: 1)


class OnlineRewardModel:
    """A preference ensemble on frozen features, refitted on the project's labels in a background thread."""

    def __init__(self, db_path: str, project: str, encoder=None, refit_every: int = 8, members: int = 8,
                 seed: int = 0, prior: Callable[[list, list], list[float]] | None = None):
        self.db_path, self.project, self.refit_every, self.members, self.seed = db_path, project, refit_every, members, seed
        self.encoder = encoder or FrozenTextEncoder()
        self.prior = prior
        self.dim = self.encoder.dim + (1 if prior else 0)
        init = torch.zeros(self.dim)
        if prior:
            init[-1] = 1.0  # the trained reward model's standardised score, as it is, until labels say otherwise
        self.init = init
        self.ensemble = PreferenceEnsemble(self.dim, members=members, seed=seed, init=init)
        self._prior_stats: tuple[float, float] | None = None
        self._prior_cache: dict[tuple[str, str], float] = {}
        self._seen: set[tuple[str, str, str]] = set()
        self._labels_at_fit = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="online-rm")
        self._fitting: Future | None = None
        self._lock = threading.Lock()
        self.refits = 0
        self.agreement: float = math.nan  # on the newest labels, before fitting on them
        self.agreement_pairs = 0
        # Every label's (members,) margin measured before the ensemble was fitted on it: what calibrates its scale.
        self._unseen_margins: list[torch.Tensor] = []
        self.temperature = 1.0

    def features(self, queries: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
        features = self.encoder.embed(list(queries), list(answers))
        if self.prior is None:
            return features
        raw = self._prior_scores(queries, answers)
        if self._prior_stats is None:  # standardised by the first batch it sees: the base policy's answers
            self._prior_stats = (float(raw.mean()), float(raw.std()) if len(raw) > 1 and raw.std() > 0 else 1.0)
        mean, std = self._prior_stats
        return torch.cat([features, ((raw - mean) / std)[:, None]], dim=1)

    def _prior_scores(self, queries: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
        """The trained reward model's raw scores, cached by text as the encoder's features are: every refit reads
        all of the project's labels again, and a reward model on the chat model (train rm's default) scoring each
        of them anew held a mix run at 2 steps in 6 minutes (it took 30 s a step with the MiniLM one)."""
        keys = [(str(q), str(a)) for q, a in zip(queries, answers)]
        missing = {key: (q, a) for key, q, a in zip(keys, queries, answers) if key not in self._prior_cache}
        if missing:
            texts = list(missing.values())
            scored = self.prior([q for q, _ in texts], [a for _, a in texts])
            self._prior_cache.update(zip(missing, (float(value) for value in scored)))
        return torch.tensor([self._prior_cache[key] for key in keys], dtype=torch.float32)

    def scores(self, queries: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
        """(members, N) scores of the answers by the newest fitted ensemble."""
        with self._lock:
            ensemble = self.ensemble
        return ensemble.scores(self.features(queries, answers))

    def learn(self) -> int:
        """Take in the project's labels: measure agreement on the pairs not seen before, then refit in the
        background when `refit_every` labels arrived since the last fit. Returns the project's label count."""
        db = open_db(self.db_path)
        try:
            labels = labeling.label_count(db, _project_id(db, self.project))
            if labels - self._labels_at_fit < self.refit_every or (self._fitting and not self._fitting.done()):
                return labels
            pairs = active_learning.preference_texts(db, self.project)
        finally:
            db.conn.close()
        new = [pair for pair in pairs if pair not in self._seen]
        if new:
            prompts = [p for p, _, _ in new]
            with self._lock:
                ensemble = self.ensemble
            chosen_new = self.features(prompts, [c for _, c, _ in new])
            rejected_new = self.features(prompts, [r for _, _, r in new])
            self.agreement = ensemble.agreement(chosen_new, rejected_new)
            self.agreement_pairs = len(new)
            self._unseen_margins.append(ensemble.scores(chosen_new) - ensemble.scores(rejected_new))
            self.temperature = calibrated_temperature(torch.cat(self._unseen_margins, dim=1), min_pairs=CALIBRATION_PAIRS)
        self._seen.update(new)
        self._labels_at_fit = labels
        # Features in this thread (the encoder's cache is not shared across threads); the fit in the background.
        prompts = [p for p, _, _ in pairs]
        chosen = self.features(prompts, [c for _, c, _ in pairs])
        rejected = self.features(prompts, [r for _, _, r in pairs])
        self._fitting = self._executor.submit(self._fit, chosen, rejected)
        return labels

    def _fit(self, chosen: torch.Tensor, rejected: torch.Tensor) -> None:
        ensemble = PreferenceEnsemble(self.dim, members=self.members, seed=self.seed, init=self.init)
        ensemble.fit(chosen, rejected)
        with self._lock:
            self.ensemble = ensemble
            self.refits += 1

    def wait_for_fit(self) -> None:
        if self._fitting is not None:
            self._fitting.result()

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def _project_id(db, project: str) -> int:
    return get_project(db, project).id


def pick_groups(information: Sequence[float], n_human: int, rng: random.Random) -> list[int]:
    """The groups people judge: the first n_human of active_learning's serving order (most informative first,
    every 1/RANDOM_SHARE-th place random)."""
    order = active_learning.order_with_random_share(list(range(len(information))), information,
                                                    active_learning.RANDOM_SHARE, rng)
    return sorted(index for index, _, _ in order[:n_human])


class ActiveMixReward:
    """The reward source of a mixed run (module docstring). `last_stats` carries what the Train tab plots."""

    def __init__(self, queue: HumanRewardQueue, model: OnlineRewardModel, human_share: float = 0.25,
                 timeout: float = 300.0, seed: int = 0):
        if not 0 <= human_share <= 1:
            raise ValueError(f"human_share={human_share}: must be in [0, 1]")
        self.queue, self.model, self.human_share, self.timeout = queue, model, human_share, timeout
        self.rng = random.Random(seed)
        self.answers_judged = 0  # by people, for this run: a ranking of 4 counts as 4
        self.labels_used = 0
        self.wait_seconds = 0.0
        self._ahead: dict[tuple, list[int]] = {}  # batch queued ahead -> the groups picked for people
        self.last_stats: dict[str, float] = {}
        # The last call's scores at the model's temperature (members, N), as its rewards were computed from them,
        # and the answers whose rewards are people's: how sure each group's rewards were (MixJudge reads them).
        self.last_scores: torch.Tensor | None = None
        self.last_from_people: set[int] = set()

    def _select(self, queries: list[str], responses: list[str]):
        groups = self.queue.groups(queries)
        scores = self.model.scores(queries, responses)  # (members, N)
        if self.queue.label_kind == "ranking":
            information = [preference_information(scores[:, group]) for group in groups]
        else:
            information = [float(scores[:, group].std(0).mean()) for group in groups]
        n_human = min(len(groups), math.ceil(self.human_share * len(groups))) if self.human_share > 0 else 0
        return groups, scores, pick_groups(information, n_human, self.rng)

    def request_ahead(self, queries: list[str], responses: list[str]) -> None:
        """Overlap: pick and queue this batch's human groups now; __call__ on the same batch waits for them."""
        groups, _, picked = self._select(list(queries), list(responses))
        indices = [i for g in picked for i in groups[g]]
        if indices:
            self.queue.request_ahead([queries[i] for i in indices], [responses[i] for i in indices])
        self._ahead[(tuple(queries), tuple(responses))] = picked

    def __call__(self, queries: Sequence[str], responses: Sequence[str]) -> list[float | None]:
        queries, responses = list(queries), list(responses)
        groups, scores, picked = self._select(queries, responses)
        picked = self._ahead.pop((tuple(queries), tuple(responses)), picked)
        indices = [i for g in picked for i in groups[g]]
        human: list[float | None] = []
        if indices:
            started = time.monotonic()
            human = self.queue.request_and_wait([queries[i] for i in indices], [responses[i] for i in indices],
                                                self.timeout)
            self.wait_seconds += time.monotonic() - started  # the trainer idles, waiting for people
        rewards: list[float] = [0.0] * len(responses)
        scale = self.model.temperature  # as sure as the model has proved on labels it had not seen
        for group in same_prompt_runs(queries):  # each prompt's answers, whatever kind of label people give
            for i, value in zip(group, expected_centred_ranks(scale * scores[:, group]).tolist()):
                rewards[i] = value
        from_human = 0
        by_index = dict(zip(indices, human))
        self.last_scores, self.last_from_people = scale * scores, set()
        for g in picked:
            values = [by_index.get(i) for i in groups[g]]
            if all(v is not None for v in values):  # a group people judged: their rewards, all of the group
                for i, value in zip(groups[g], values):
                    rewards[i] = value
                from_human += len(values)
                self.last_from_people.update(groups[g])
                self.labels_used += 1  # one ranking of the group, or one rating
        self.answers_judged += from_human
        self.model.learn()  # the labels just given: agreement first, then a background refit
        self.last_stats = {
            "reward/from_human": float(from_human),
            "reward/from_rm": float(len(rewards) - from_human),
            "human/answers_judged": float(self.answers_judged),
            "human/labels_used": float(self.labels_used),
            "rm_online/refits": float(self.model.refits),
            "rm_online/temperature": self.model.temperature,
            "human/wait_seconds": self.wait_seconds,
        }
        if not math.isnan(self.model.agreement):
            self.last_stats["rm_online/agreement"] = self.model.agreement
            self.last_stats["rm_online/agreement_pairs"] = float(self.model.agreement_pairs)
        return rewards
