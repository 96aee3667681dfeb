"""A resumed human-reward run waits for the items it had queued before it stopped: the same items, labelled once."""
from labeler.services.data import accounts, labeling
from labeler.services.training import jobs
from labeler.services.labels.human_reward import HumanRewardQueue
from labeler.services.training.runners.rollouts import resumed_rollouts


def test_a_resumed_worker_waits_for_the_same_items(db, db_path, tmp_path, tiny_model_dir):
    from rlhf.loading import load_tokenizer

    accounts.create_user(db, "ann", "a-long-password")
    run = jobs.create_run(db, "ppo", {"reward": "human"}, runs_dir=tmp_path, start=False)
    before = HumanRewardQueue(db_path, "default", run.id, label_kind="ranking", group_size=2)
    (item_id,) = before.request(["The film was", "The film was"], [" wonderful", " dreadful"])
    # The worker dies here. Someone ranks the item meanwhile.
    item = labeling.next_item(db, "default", "ann", "ranking")
    assert item.item_id == item_id
    ids = {r["text"]: r["id"] for r in item.responses}
    labeling.submit_ranking(db, "default", "ann", item_id, [[ids[" wonderful"]], [ids[" dreadful"]]])

    after = HumanRewardQueue(db_path, "default", run.id, label_kind="ranking", group_size=2, poll_seconds=0.05)
    assert [p[0] for p in after.pending()] == [item_id]
    tokenizer = load_tokenizer(str(tiny_model_dir), padding_side="left")
    rollouts = resumed_rollouts(after, tokenizer, False, timeout=5)
    assert [(r.answer, r.score) for r in rollouts] == [(" wonderful", 1.0), (" dreadful", -1.0)]
    assert tokenizer.decode(rollouts[0].query) == "The film was"
    assert tokenizer.decode(rollouts[0].response) == " wonderful"
    assert after.pending() == [] and labeling.waiting_for_run(db, run.id) == 0  # waited for, then released
    assert db.execute("SELECT COUNT(*) FROM items WHERE run_id = ?", [run.id]).fetchone()[0] == 1  # not queued again
