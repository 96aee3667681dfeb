"""Human rewards: PPO rollouts go into the rating queue; an annotator thread rates them through the labeling
service; the rewards come back mapped to [-1, 1] around the Likert midpoint."""
from __future__ import annotations

import threading
import time

import pytest

from labeler.services.data import accounts, labeling
from labeler.services.training import jobs
from labeler.services.labels.human_reward import PPO_PRIORITY, HumanRewardQueue, rating_to_reward
from rlhf.rewards import HumanReward, MixReward
from storage import open_db


def test_rating_to_reward_centres_on_the_midpoint():
    # scale 1..7: mid 4, half range 3
    assert rating_to_reward(7, 1, 7) == 1.0
    assert rating_to_reward(4, 1, 7) == 0.0
    assert rating_to_reward(5, 1, 7) == pytest.approx(1 / 3)
    assert rating_to_reward(1, 1, 7) == -1.0
    # scale 1..5: mid 3, half range 2 -> 4.5 gives 0.75
    assert rating_to_reward(4.5, 1, 5) == pytest.approx(0.75)


@pytest.fixture
def setup(db, db_path, tmp_path):
    accounts.create_user(db, "ann", "a-long-password")
    # An older ordinary item, so the test also checks that rollouts jump the queue.
    db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (1, 'old prompt', 'h-old')")
    db.execute("INSERT INTO responses (prompt_id, text) VALUES (1, 'old answer')")
    labeling.create_items(db, "default")
    run = jobs.create_run(db, "ppo", {"reward": "human"}, runs_dir=tmp_path, start=False)
    return run.id


def _annotator(db_path, scores_by_response, stop, seen):
    """Plays the annotator: takes the next rating item, rates rollouts by their response text."""
    db = open_db(db_path)
    while not stop.is_set():
        item = labeling.next_item(db, "default", "ann", "rating")
        if item is None or item.run_id is None:
            time.sleep(0.05)
            if item is not None:
                labeling.skip_item(db, "default", "ann", item.item_id)
            continue
        text = item.responses[0]["text"]
        seen.append(text)
        labeling.submit_rating(db, "default", "ann", item.item_id, scores_by_response[text])


def test_annotator_thread_ratings_become_exactly_the_rewards(db_path, db, setup):
    run_id = setup
    scores = {"great!": 7, "meh": 4, "bad": 2, "fine": 5}
    queue = HumanRewardQueue(db_path, "default", run_id, poll_seconds=0.05)
    reward = HumanReward(queue.request_and_wait, timeout=30)
    stop, seen = threading.Event(), []
    thread = threading.Thread(target=_annotator, args=(db_path, scores, stop, seen))
    thread.start()
    try:
        rewards = reward(["q1", "q2", "q3", "q4"], list(scores))
    finally:
        stop.set()
        thread.join()
    # 7 -> 1, 4 -> 0, 2 -> -2/3, 5 -> 1/3 on the 1..7 scale
    assert rewards == pytest.approx([1.0, 0.0, -2 / 3, 1 / 3])
    assert sorted(seen[:4]) == sorted(scores)  # the rollouts came before the older ordinary item
    items = db.execute("SELECT run_id, priority FROM items WHERE run_id = ?", [run_id]).fetchall()
    assert len(items) == 4 and all(row["priority"] == 0 for row in items)  # released after the wait
    responses = db.execute("SELECT text, source, run_id FROM responses WHERE run_id = ? ORDER BY id", [run_id]).fetchall()
    assert [tuple(r) for r in responses] == [(t, "ppo", run_id) for t in scores]


def test_timeout_skip_returns_none_for_unrated(db_path, db, setup):
    run_id = setup
    queue = HumanRewardQueue(db_path, "default", run_id, policy="skip", poll_seconds=0.05)
    item_ids = queue.request(["q1", "q2"], ["rated", "ignored"])
    assert labeling.waiting_for_run(db, run_id) == 2
    waiting = db.execute("SELECT id FROM items WHERE run_id = ? AND priority = ? ORDER BY id", [run_id, PPO_PRIORITY])
    assert [row[0] for row in waiting.fetchall()] == item_ids
    item = labeling.next_item(db, "default", "ann", "rating")
    assert item.item_id == item_ids[0] and item.run_id == run_id  # high priority first
    labeling.submit_rating(db, "default", "ann", item.item_id, 1)
    started = time.monotonic()
    assert queue.wait(item_ids, timeout=0.5) == [-1.0, None]
    assert 0.5 <= time.monotonic() - started < 5
    assert labeling.waiting_for_run(db, run_id) == 0  # no longer waited for: back to normal priority
    assert db.execute("SELECT priority FROM items WHERE id = ?", [item_ids[1]]).fetchone()[0] == 0


def test_timeout_wait_policy_waits_again_until_rated(db_path, db, setup):
    run_id = setup
    queue = HumanRewardQueue(db_path, "default", run_id, policy="wait", poll_seconds=0.05)
    item_ids = queue.request(["q"], ["late"])

    def rate_late():
        time.sleep(0.8)  # longer than the 0.3 s timeout: only "wait again" sees it
        other = open_db(db_path)
        item = labeling.next_item(other, "default", "ann", "rating")
        labeling.submit_rating(other, "default", "ann", item.item_id, 6)

    thread = threading.Thread(target=rate_late)
    thread.start()
    rewards = queue.wait(item_ids, timeout=0.3)
    thread.join()
    assert rewards == pytest.approx([2 / 3])  # (6 - 4) / 3


def test_mix_falls_back_to_the_reward_model_at_the_timeout(db_path, db, setup):
    run_id = setup
    queue = HumanRewardQueue(db_path, "default", run_id, policy="rm", poll_seconds=0.05)
    rm = lambda q, r: [0.5 if "nice" in x else -0.5 for x in r]  # noqa: E731

    def request_and_wait(queries, responses, timeout):
        # The annotator rates the first rollout as soon as it is queued (no thread: no timing race); nobody
        # rates the second, so the wait ends at the timeout.
        item_ids = queue.request(queries, responses)
        item = labeling.next_item(db, "default", "ann", "rating")
        assert item.item_id == item_ids[0]
        labeling.submit_rating(db, "default", "ann", item.item_id, 7)
        return queue.wait(item_ids, timeout)

    mix = MixReward(HumanReward(request_and_wait, timeout=0.3), rm, w_human=1.0, w_rm=0.5)
    rewards = mix(["q1", "q2"], ["nice one", "dull"])
    # first: rated 7 -> 1.0; 1.0 * 1.0 + 0.5 * 0.5 = 1.25. second: unrated -> (1 + 0.5) * -0.5 = -0.75
    assert rewards == pytest.approx([1.25, -0.75])
    assert mix.last_stats["reward/from_human"] == 1 and mix.last_stats["reward/from_rm"] == 1
    assert PPO_PRIORITY > 0


def test_ranking_mode_puts_each_group_in_one_rank_item_and_returns_centred_ranks(db_path, db, setup):
    from labeler.services.labels.human_reward import group_rollouts

    run_id = setup
    queue = HumanRewardQueue(db_path, "default", run_id, poll_seconds=0.05, label_kind="ranking")
    queries = ["q1", "q1", "q1", "q2", "q2", "q2"]
    answers = ["best", "worst", "middle", "tie a", "tie b", "top"]
    item_ids = queue.request(queries, answers)
    assert len(item_ids) == 2 and labeling.waiting_for_run(db, run_id, "ranking") == 2
    texts = {}
    for _ in item_ids:
        item = labeling.next_item(db, "default", "ann", "ranking")
        assert item.run_id == run_id  # the run's groups come first
        by_text = {r["text"]: r["id"] for r in item.responses}
        texts.update(by_text)
        if "best" in by_text:
            order = [[by_text["best"]], [by_text["middle"]], [by_text["worst"]]]
        else:
            order = [[by_text["top"]], [by_text["tie a"], by_text["tie b"]]]
        labeling.submit_ranking(db, "default", "ann", item.item_id, order)
    # q1: ranks 1, 3, 2 -> +1, -1, 0; q2: top rank 1, the tie ranks 2.5 -> 1 - 2 * 1.5 / 2 = -0.5 each.
    assert queue.wait(item_ids, timeout=5) == pytest.approx([1.0, -1.0, 0.0, -0.5, -0.5, 1.0])
    assert labeling.waiting_for_run(db, run_id) == 0
    assert group_rollouts(["a", "a", "b", "b", "a", "a"]) == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="answers_per_prompt"):
        group_rollouts(["a", "b", "b"])


def test_ranking_mode_waits_for_min_ratings_rankings(db_path, db, setup):
    run_id = setup
    accounts.create_user(db, "bob", "a-long-password")
    labeling_project = "default"
    db.execute("UPDATE projects SET overlap = 2")
    queue = HumanRewardQueue(db_path, labeling_project, run_id, poll_seconds=0.05, label_kind="ranking", min_ratings=2)
    (item_id,) = queue.request(["q", "q"], ["x", "y"])
    for user, prefer in (("ann", "x"), ("bob", "y")):
        item = labeling.next_item(db, labeling_project, user, "ranking")
        ids = {r["text"]: r["id"] for r in item.responses}
        other = "y" if prefer == "x" else "x"
        labeling.submit_ranking(db, labeling_project, user, item.item_id, [[ids[prefer]], [ids[other]]])
        if user == "ann":
            assert queue.collect([item_id]) == [None, None]  # one ranking of the two asked for
    assert queue.collect([item_id]) == [0.0, 0.0]  # +1 and -1 averaged


def test_group_rollouts_with_a_group_size_splits_repeated_prompts():
    from labeler.services.labels.human_reward import group_rollouts

    # One prompt repeated (a project with a single prompt): groups by answers_per_prompt, not by text.
    assert group_rollouts(["p"] * 6, 3) == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="groups of 2"):
        group_rollouts(["a", "a", "b"], 2)
