"""The Train tab's banner names what a running human-reward run waits for, by kind and tab."""
from labeler.services.training import jobs
from labeler.services.data import labeling
from labeler.services.execution import runs
from labeler.ui.tabs.train.run_views import waiting_banner


def test_banner_counts_rankings_and_ratings_and_disappears_when_the_run_ends(db, tmp_path):
    prompt_id = db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (1, 'p', 'h')").lastrowid
    for i in range(4):
        db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (?, ?, 'm')", [prompt_id, f"answer {i}"])
    labeling.create_items(db, "default")
    run = jobs.create_run(db, "ppo", {"reward": "mix"}, runs_dir=tmp_path, start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert waiting_banner(db, "default")["visible"] is False
    db.execute("UPDATE items SET priority = 100, run_id = ?", [run.id])  # 4 rating items and 1 ranking item
    banner = waiting_banner(db, "default")
    assert banner["visible"] is True
    assert f"run **#{run.id}** is waiting for **1** rankings in the **Rank** tab and **4** ratings in the **Rate** tab" \
        in banner["value"]
    runs.finish(db, run.id, "cancelled", "cancelled by user")
    assert waiting_banner(db, "default")["visible"] is False
