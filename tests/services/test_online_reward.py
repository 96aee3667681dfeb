"""A mixed run's rewards: people rank the groups picked for them, the online reward model scores the rest and
learns from each label (agreement measured before it trains on them)."""
import random
import threading

import pytest
import torch

from labeler.services.data import accounts, labeling
from labeler.services.training import jobs
from labeler.services.labels.human_reward import HumanRewardQueue
from labeler.services.labels.online_reward import ActiveMixReward, OnlineRewardModel, pick_groups
from storage import open_db

GOOD = ["a wonderful, moving film", "brilliant and joyful", "a delightful, lovely story", "great fun, superb cast"]
BAD = ["a dull, boring mess", "awful and tedious", "a terrible, ugly story", "bad acting, horrible plot"]


def test_pick_groups_by_hand():
    # 8 groups, 2 for people: the two most informative (groups 5 and 2).
    assert pick_groups([0.1, 0.0, 0.3, 0.2, 0.0, 0.9, 0.0, 0.0], 2, random.Random(0)) == [2, 5]
    # 4 for people: the next by information (3), then the 4th place is a random draw among the rest.
    picked = pick_groups([0.1, 0.0, 0.3, 0.2, 0.0, 0.9, 0.0, 0.0], 4, random.Random(0))
    assert len(picked) == 4 and {2, 3, 5} <= set(picked)


def _ranker(db_path, stop):
    """An annotator who ranks the queued groups: GOOD answers first."""
    db = open_db(db_path)
    while not stop.is_set():
        item = labeling.next_item(db, "default", "ann", "ranking")
        if item is None:
            stop.wait(0.02)
            continue
        ranked = sorted(item.responses, key=lambda r: r["text"] not in GOOD)
        labeling.submit_ranking(db, "default", "ann", item.item_id, [[r["id"]] for r in ranked])


def test_people_rank_the_picked_groups_and_the_model_learns_the_rest(db, db_path, tmp_path):
    accounts.create_user(db, "ann", "a-long-password")
    run = jobs.create_run(db, "ppo", {"reward": "mix"}, runs_dir=tmp_path, start=False)
    queue = HumanRewardQueue(db_path, "default", run.id, poll_seconds=0.02, label_kind="ranking")
    model = OnlineRewardModel(db_path, "default", refit_every=2)
    reward = ActiveMixReward(queue, model, human_share=0.5, timeout=30)
    stop = threading.Event()
    thread = threading.Thread(target=_ranker, args=(db_path, stop), daemon=True)
    thread.start()
    try:
        queries = [f"Review {k}: the film was" for k in range(4) for _ in range(2)]
        answers = [a for k in range(4) for a in (GOOD[k], BAD[k])]
        first = reward(queries, answers)
        # Two of four groups ranked by people: +1 / -1; the others from a model with no labels yet: 0.
        assert sorted(first) == [-1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
        assert reward.last_stats["reward/from_human"] == 4 and reward.last_stats["human/labels_used"] == 2
        model.wait_for_fit()
        assert model.refits == 1
        second_answers = [a for k in range(4) for a in (BAD[k], GOOD[k])]  # the good answer second this time
        second = reward([q.replace("Review", "Critique") for q in queries], second_answers)
        # The model, fitted on two rankings, scores the unlabelled groups' good answers above their bad ones.
        for k in range(4):
            assert second[2 * k + 1] > second[2 * k]
        assert reward.last_stats["human/answers_judged"] == 8 and reward.last_stats["human/labels_used"] == 4
        # Agreement with the second batch's labels, measured before fitting on them.
        assert reward.last_stats["rm_online/agreement"] == 1.0
        assert labeling.waiting_for_run(db, run.id) == 0
    finally:
        stop.set()
        thread.join()
        model.close()


class _NoFeatures:
    """An encoder with no opinion (zero features): the prior's column is all that is left to look at."""

    dim = 2

    def embed(self, prompts, answers):
        return torch.zeros(len(answers), self.dim)


def test_the_trained_reward_model_scores_each_answer_once_however_often_refits_read_it(db_path):
    calls = []

    def prior(queries, answers):
        calls.append(list(answers))
        return [float(len(a)) for a in answers]

    model = OnlineRewardModel(db_path, "default", encoder=_NoFeatures(), prior=prior)
    first = model.features(["q", "q"], ["short", "a longer answer"])
    again = model.features(["q", "q", "q"], ["a longer answer", "short", "new one"])
    assert calls == [["short", "a longer answer"], ["new one"]]  # each text scored once
    # Standardised by the first batch: lengths 5 and 15, mean 10, std 7.0711 (n - 1); "new one" (7): -3 / 7.0711.
    assert first[:, -1].tolist() == pytest.approx([-0.70711, 0.70711], abs=1e-5)
    assert again[:, -1].tolist() == pytest.approx([0.70711, -0.70711, -0.42426], abs=1e-5)
    model.close()
