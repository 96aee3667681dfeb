"""The queue's order: a run's answers first (even before an item reserved earlier), the project's selection
(arrival or uncertainty), and a run's items released when it ends."""
from labeling_helpers import add_prompt, make_users, rating_items

from labeler.services.training import jobs
from labeler.services.data import labeling, projects
from labeler.services.execution import runs
from labeler.services.data.labeling import create_items, next_item, submit_rating

P = "default"


def test_uncertainty_selection_serves_the_highest_score_first_and_unscored_last(db):
    make_users(db, "alice")
    add_prompt(db, "p", 4)
    create_items(db, P, kinds=("rating",))
    a, b, c, d = rating_items(db)
    db.execute("UPDATE items SET selection_score = ? WHERE id = ?", [0.2, b])
    db.execute("UPDATE items SET selection_score = ? WHERE id = ?", [0.9, c])
    db.execute("UPDATE items SET selection_score = ? WHERE id = ?", [0.5, d])
    assert next_item(db, P, "alice").item_id == a  # arrival: oldest first, the scores ignored
    labeling.skip_item(db, P, "alice", a)
    projects.update_project(db, P, selection="uncertainty")
    served = []
    while (item := next_item(db, P, "alice")) is not None:
        served.append(item.item_id)
        submit_rating(db, P, "alice", item.item_id, 4, request_id=item.request_id)
    assert served == [c, d, b]  # a was skipped; scored items by score


def test_a_runs_items_come_before_an_item_reserved_earlier(db, tmp_path):
    make_users(db, "alice")
    add_prompt(db, "p", 2)
    create_items(db, P, kinds=("rating",))
    first, second = rating_items(db)
    assert next_item(db, P, "alice").item_id == first  # reserved, not yet labelled
    run = jobs.create_run(db, "ppo", {"reward": "human"}, project=P, runs_dir=tmp_path, start=False)
    db.execute("UPDATE items SET priority = 100, run_id = ? WHERE id = ?", [run.id, second])
    assert next_item(db, P, "alice").item_id == second  # the run's item jumps ahead of the reservation
    submit_rating(db, P, "alice", second, 5)
    assert next_item(db, P, "alice").item_id == first  # then the reserved one comes back


def test_waiting_counts_rankings_and_an_ended_run_releases_its_items(db, tmp_path):
    make_users(db, "alice")
    add_prompt(db, "p", 4)
    create_items(db, P, kinds=("ranking",))
    run = jobs.create_run(db, "ppo", {"reward": "human"}, project=P, runs_dir=tmp_path, start=False)
    db.execute("UPDATE items SET priority = 100, run_id = ?", [run.id])
    assert labeling.waiting_for_run(db, run.id) == 1
    assert labeling.waiting_for_run(db, run.id, "rating") == 0
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert runs.finish(db, run.id, "cancelled", "cancelled by user")
    assert labeling.waiting_for_run(db, run.id) == 0
    assert db.execute("SELECT priority FROM items").fetchall()[0][0] == 0
    db.execute("UPDATE items SET priority = 100")
    assert labeling.release_run_items(db, run.id) == 1 and labeling.waiting_for_run(db, run.id) == 0
