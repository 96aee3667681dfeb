"""The default measure (issue 45, item 2): people's blind pairs once someone can judge them, before a reward model
trained on the same few labels (an optimistic judge of its own policy); then the newest reward model; then a
function-rewarded run's own function; then none. Every place that shows the measure says which one and why, and a
finished DPO run on a project whose people labelled queues its blind pairs with no measure set."""
from __future__ import annotations

import json

from labeling_helpers import add_ranked_pairs, make_users

from labeler.cli import main
from labeler.services.data import accounts, labeling, projects, prompts
from labeler.services.evals import evaluation, measures, people_eval
from labeler.services.execution import run_metrics, runs
from labeler.services.labels import labels_import
from labeler.services.serving import models
from labeler.services.settings.job_settings import JobConfig
from labeler.services.training import jobs
from labeler.ui.tabs.admin.snapshot import measure_choices, snapshot

WORDS = "eval_rewards:words"
NOBODY = "default: nobody has labelled this project"


def _reward_model(db, name: str, path, project_id: int = 1) -> None:
    run_id = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (?, 'rm', 'succeeded')",
                        [project_id]).lastrowid
    models.register_model(db, name, str(path), "reward", run_id=run_id)


def _imported_pair(db, tmp_path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "Imported prompt", "chosen": "yes", "rejected": "no"}) + "\n")
    labels_import.import_preferences(db, path)


def test_the_default_is_people_once_someone_labelled_else_the_newest_reward_model_else_none(db, tmp_path,
                                                                                          tiny_encoder_dir):
    function_run = dict(run_function=WORDS)
    # Nothing to judge with: no verdict, unless a run brings its own function.
    assert measures.resolve(db, "default") == measures.Resolved("", f"{NOBODY} yet and no reward model was trained on it")
    assert measures.resolve(db, "default", **function_run).spec == WORDS
    _reward_model(db, "rm-a", tiny_encoder_dir)
    assert measures.resolve(db, "default") == measures.Resolved(
        "rm:rm-a", f"{NOBODY} yet; the newest reward model trained on it")
    assert measures.resolve(db, "default", **function_run).spec == "rm:rm-a"  # a reward model before the function

    # Who does not count: imported labels (no account), an account that never labelled, labels in another project.
    _imported_pair(db, tmp_path)
    make_users(db, "ann", "bob")
    accounts.create_user(db, "boss", "a long enough password", role="admin")  # an admin who never labels
    other = projects.create_project(db, "other")
    add_ranked_pairs(db, 1, annotator="bob", project="other")
    assert measures.labellers(db, 1) == 0 and measures.labellers(db, other.id) == 1
    assert measures.resolve_measure(db, "default") == "rm:rm-a"

    # One person labelled here: people judge, even with a reward model and a function-rewarded run.
    add_ranked_pairs(db, 2, annotator="ann")
    assert measures.resolve(db, "default") == measures.Resolved(
        "people", "default: 1 person has labelled this project and can rank the blind pairs")
    assert measures.resolve(db, "default", **function_run).spec == "people"
    add_ranked_pairs(db, 1, first=2, annotator="bob")
    assert measures.labellers(db, 1) == 2
    assert measures.resolve(db, "default").source.startswith("default: 2 people have labelled")

    # Deactivated accounts rank no blind pair: the reward model again.
    accounts.set_active(db, "ann", False)
    accounts.set_active(db, "bob", False)
    assert measures.resolve_measure(db, "default") == "rm:rm-a"
    accounts.set_active(db, "ann", True)
    assert measures.resolve_measure(db, "default") == "people"

    # A measure set for the project wins over every default.
    measures.set_measure(db, "default", "vader")
    assert measures.resolve(db, "default") == measures.Resolved("vader", measures.SET_HERE)
    assert measures.default(db, "default").spec == "people"  # what blank would mean now


def test_the_words_say_the_measure_and_where_it_came_from(db, tiny_encoder_dir):
    assert measures.resolve(db, "default").words == (
        "none (default: nobody has labelled this project yet and no reward model was trained on it: no verdict; set one "
        "with projects set --measure)")
    _reward_model(db, "rm-a", tiny_encoder_dir)
    assert measures.resolve(db, "default").words == (
        "reward model rm-a (default: nobody has labelled this project yet; the newest reward model trained on it)")
    make_users(db, "ann")
    add_ranked_pairs(db, 1, annotator="ann")
    people = ("people's blind comparisons (default: 1 person has labelled this project and can rank the blind "
              "pairs)")
    assert measures.resolve(db, "default").words == people
    # The Admin tab: its blank choice is the default as it resolves now, and the field says what judges now.
    shown = snapshot(db, "default")[-1]
    assert shown["choices"][0] == (people, "") and shown["value"] == ""
    assert shown["info"].startswith(f"Judged now by: {people}. ")
    measures.set_measure(db, "default", "vader")
    shown = snapshot(db, "default")[-1]
    assert shown["value"] == "vader" and shown["choices"][0] == (people, "")
    assert shown["info"].startswith("Judged now by: vader (sentiment; set for this project). ")
    # Before a project exists (the new-project form) the rule itself.
    assert measure_choices(db)[0] == (f"default: {measures.DEFAULT_WORDS}", "")
    assert "people's blind comparisons once someone" in measures.GRAMMAR


def test_projects_list_and_set_print_the_resolved_measure(db, db_path, capsys, tiny_encoder_dir):
    _reward_model(db, "rm-a", tiny_encoder_dir)
    assert main(["projects", "list", "--db", str(db_path)]) == 0
    assert ("measure reward model rm-a (default: nobody has labelled this project yet; the newest reward model "
            "trained on it)") in capsys.readouterr().out
    make_users(db, "ann")
    add_ranked_pairs(db, 1, annotator="ann")
    assert main(["projects", "set", "default", "--db", str(db_path), "--overlap", "1"]) == 0
    assert "measure people's blind comparisons (default: 1 person has labelled" in capsys.readouterr().out
    assert main(["projects", "set", "default", "--db", str(db_path), "--measure", "rm:rm-a"]) == 0
    assert "measure reward model rm-a (set for this project)" in capsys.readouterr().out


def test_a_finished_dpo_run_on_a_labelled_project_queues_blind_pairs_with_no_measure_set(db, tmp_path, tiny_model_dir,
                                                                                       tiny_encoder_dir, capsys):
    """The recommended path (rankings -> DPO, no measure set, here even a reward model on the project): the run's
    evaluation is judged by people, its blind pairs wait in the Rank tab, and the verdict says so until one is
    ranked."""
    from labeler.worker import run_worker

    make_users(db, "ann")
    add_ranked_pairs(db, 4, annotator="ann")
    _reward_model(db, "rm-a", tiny_encoder_dir)  # the old default would have judged by it
    heldout = ["The film was", "I watched it and", "Honestly, the plot"]
    prompts.add_prompts(db, heldout)
    db.execute(f"UPDATE prompts SET split = 'test' WHERE text IN ({', '.join('?' * len(heldout))})", heldout)
    assert projects.get_project(db).measure == ""

    run = jobs.create_run(db, "dpo", {"model": str(tiny_model_dir), "steps": 1, "per_device_train_batch_size": 2,
                                      "max_length": 64, "include_rating_pairs": "false", "eval_samples": 1,
                                      "max_new_tokens": 3, "checkpoint_every": 0},
                          runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))

    before, after = evaluation.run_comparison(db, run.id)
    assert after.settings["reward"] == before.settings["reward"] == "people"
    assert "eval/reward_mean" not in after.metrics  # people judge; nothing scored the answers
    log = capsys.readouterr().out  # the run's log is stdout in process
    assert "evaluation: judged by people's blind comparisons (default: 1 person has labelled" in log
    assert "3 blind comparisons of the base's and the model's answers queued for people (Rank)" in log
    waiting = "Not yet judged: 3 blind pairs wait in the Rank tab for people to rank"
    assert evaluation.run_verdict(db, run.id)[0].startswith(waiting)
    assert evaluation.verdict_lines(db, [after])[0].startswith(f"{after.model}: {waiting}")  # `eval` says it too
    from labeler.ui.tabs.train.run_views import comparison_frame

    note = comparison_frame(db, run.id)[2]  # the run's page says it once, in bold, and no second "waiting" line
    assert note.startswith(f"**{waiting}") and "waiting" not in note and "People's verdict" not in note

    item = labeling.next_item(db, "default", "ann", "ranking")  # the blind pairs come first
    by_model = {r["model"]: r["id"] for r in item.responses}
    assert set(by_model) == {after.model, str(tiny_model_dir)} and item.prompt in heldout
    labeling.submit_ranking(db, "default", "ann", item.item_id, [[by_model[after.model]], [by_model[str(tiny_model_dir)]]])
    assert people_eval.people_win_rate(db, run.id, after.model).wins == 1
    assert evaluation.run_verdict(db, run.id)[0].endswith("(people's blind comparisons)")
    assert "People's verdict: the model won **100%** of 1 blind comparisons" in comparison_frame(db, run.id)[2]


def test_a_people_judged_run_without_pairs_says_why_there_is_no_verdict(db):
    projects.update_project(db, "default", measure="people")
    run_id = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (1, 'dpo', 'succeeded')").lastrowid
    settings = {"reward": "people", "prompts": "heldout", "samples": 1}
    db.execute("INSERT INTO evaluations (project_id, model, kl_base, run_id, settings_json) VALUES (1, 'dpo-run1', "
               "'base', ?, ?)", [run_id, json.dumps(settings)])
    sentence = evaluation.run_verdict(db, run_id)[0]
    assert sentence.startswith("No verdict: people's blind comparisons are the measure, but no blind pair of this "
                               "run was queued") and "rlhf-studio eval --model dpo-run1" in sentence


def test_a_runs_held_out_curve_is_scored_by_the_judge_that_needs_nobody_when_people_judge_the_finished_model(
        db, tiny_encoder_dir):
    job = JobConfig(reward="function", reward_function=WORDS)
    make_users(db, "ann")
    add_ranked_pairs(db, 1, annotator="ann")
    assert measures.resolve_measure(db, "default") == "people"
    # people judge the finished model; while it trains, the run's own function scores the curve
    assert measures.scorer(db, "default", WORDS).spec == WORDS
    assert evaluation.curve_settings(db, "default", job).reward == WORDS
    assert evaluation.auto_settings(db, "default", job).reward == "people"
    # a reward model trained on the project comes before the function, as in the default
    _reward_model(db, "rm-a", tiny_encoder_dir)
    assert evaluation.curve_settings(db, "default", job).reward == "rm:rm-a"
    # people set for the project: the curve still has the reward model
    measures.set_measure(db, "default", "people")
    assert measures.scorer(db, "default").spec == "rm:rm-a"
    assert evaluation.curve_settings(db, "default", JobConfig()).reward == "rm:rm-a"
    # a measure that scores by itself is the curve's judge too
    measures.set_measure(db, "default", "vader")
    assert evaluation.curve_settings(db, "default", job).reward == "vader"
