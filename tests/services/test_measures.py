"""A project's measure, answer length and held-out evaluation (issue 33): what can be set, what is refused, what
a finished run is judged by, and the note when the judge is the reward model the run optimised."""
from __future__ import annotations

import pytest

from labeler.services.evals import evaluation, measures
from labeler.services.training import jobs
from labeler.services.serving import models
from labeler.services.data import projects, prompts
from labeler.errors import InputError
from labeler.services.settings.job_settings import JobConfig
from storage import open_db


def _reward_run(db, project_id: int = 1) -> int:
    return db.execute("INSERT INTO runs (project_id, stage, status) VALUES (?, 'rm', 'succeeded')", [project_id]).lastrowid


def test_a_measure_naming_what_does_not_exist_is_refused_with_what_does(db, tiny_encoder_dir):
    models.register_model(db, "rm-helpful", str(tiny_encoder_dir), "reward")
    with pytest.raises(InputError, match=r"no reward model named 'rm-nope' \(reward models: rm-helpful\)") as error:
        measures.set_measure(db, "default", "rm:rm-nope")
    assert error.value.field == "measure"
    with pytest.raises(InputError, match="no_such_module") as error:
        measures.set_measure(db, "default", "no_such_module:judge")
    assert error.value.field == "measure"
    with pytest.raises(InputError, match="measure"):
        measures.set_measure(db, "default", "not a measure at all")
    assert projects.get_project(db).measure == ""  # nothing changed
    for spec in ("rm:rm-helpful", "vader", "people", "eval_rewards:words", ""):
        assert measures.set_measure(db, "default", spec).measure == spec


def test_the_default_measure_is_the_newest_reward_model_trained_on_the_project(db, tiny_encoder_dir):
    assert measures.resolve_measure(db, "default") == ""
    other = projects.create_project(db, "other")
    models.register_model(db, "rm-a", str(tiny_encoder_dir), "reward", run_id=_reward_run(db))
    models.register_model(db, "rm-other", str(tiny_encoder_dir), "reward", run_id=_reward_run(db, other.id))
    assert measures.resolve_measure(db, "default") == "rm:rm-a"
    models.register_model(db, "rm-b", str(tiny_encoder_dir), "reward", run_id=_reward_run(db))
    assert measures.resolve_measure(db, "default") == "rm:rm-b"
    projects.update_project(db, "default", measure="vader")
    assert measures.resolve_measure(db, "default") == "vader"


def test_a_reward_model_judging_the_run_that_optimised_it_says_so():
    trained_on_a = JobConfig(reward="rm", reward_model="rm-a")
    assert measures.judge_note("rm:rm-a", trained_on_a) == measures.OPTIMISTIC
    assert measures.judge_note("rm:rm-b", trained_on_a) == ""
    assert measures.judge_note("rm:rm-a", JobConfig(reward="mix", reward_model="")) == ""
    assert measures.judge_note("rm:rm-a", JobConfig(reward="mix", reward_model=""), newest_at_launch="rm-a") == measures.OPTIMISTIC
    assert measures.judge_note("rm:rm-a", JobConfig(reward="function")) == ""
    assert measures.judge_note("vader", trained_on_a) == ""


def test_the_run_page_note_reads_the_runs_own_reward_model(db, tiny_encoder_dir):
    models.register_model(db, "rm-a", str(tiny_encoder_dir), "reward", run_id=_reward_run(db))
    run = jobs.create_run(db, "ppo", {"reward": "rm"}, start=False)  # no reward_model: the newest, rm-a
    after = evaluation.Evaluation(1, "ppo-run", "default", run.id, {"reward": "rm:rm-a"}, {}, [], "")
    assert evaluation.run_judge_note(db, run.id, after) == measures.OPTIMISTIC
    assert evaluation.run_judge_note(db, run.id, evaluation.Evaluation(1, "x", "default", run.id, {"reward": "vader"},
                                                                       {}, [], "")) == ""


def test_runs_take_the_projects_answer_length_unless_they_set_one(db):
    chat = projects.create_project(db, "support", prompt_format="chat")
    assert chat.answer_tokens == projects.DEFAULT_ANSWER_TOKENS["chat"] == 128
    assert projects.create_project(db, "reviews", prompt_format="continue").answer_tokens == 16
    assert jobs.create_run(db, "ppo", {}, project="support", start=False).config["job"]["max_new_tokens"] == 128
    assert jobs.create_run(db, "dpo", {}, project="support", start=False).config["job"]["max_new_tokens"] == 128
    assert jobs.create_run(db, "ppo", {"max_new_tokens": 40}, project="support", start=False).config["job"]["max_new_tokens"] == 40
    assert "max_new_tokens" not in jobs.create_run(db, "rm", {}, project="support", start=False).config["job"]
    projects.update_project(db, "support", answer_tokens=64)
    assert jobs.create_run(db, "grpo", {}, project="support", start=False).config["job"]["max_new_tokens"] == 64
    with pytest.raises(InputError) as error:
        projects.update_project(db, "support", answer_tokens=0)
    assert error.value.field == "answer_tokens"


def test_the_shipped_task_keeps_its_length_and_measure(db):
    prompts.import_shipped_prompts(db)
    project = projects.get_project(db)
    assert (project.prompt_format, project.answer_tokens, project.measure) == ("continue", 16, "vader")


def test_the_migration_keeps_the_shipped_task_as_it_was(db_path, monkeypatch):
    """A database from before the migration: a project with the shipped prompts keeps 16 tokens and VADER; a chat
    project gets room for answers and follows its reward models."""
    import storage.db
    from storage.db import migrate
    from storage.migrations import MIGRATIONS

    index = [m[0] for m in MIGRATIONS].index("projects answer length, measure and held-out share")
    monkeypatch.setattr(storage.db, "MIGRATIONS", MIGRATIONS[:index])
    db = open_db(db_path)
    db.execute("INSERT INTO projects (name, prompt_format) VALUES ('chatty', 'chat')")
    db.execute("UPDATE projects SET prompt_format = 'continue' WHERE name = 'default'")
    db.execute("INSERT INTO prompts (project_id, text, text_hash, source) VALUES (1, 'I saw it', 'h', 'shipped:movie_prompts')")
    db.conn.commit()
    monkeypatch.setattr(storage.db, "MIGRATIONS", MIGRATIONS)
    migrate(db)
    shipped, chatty = projects.get_project(db, "default"), projects.get_project(db, "chatty")
    assert (shipped.answer_tokens, shipped.measure, shipped.heldout_share) == (16, "vader", 0.1)
    assert (chatty.answer_tokens, chatty.measure) == (128, "")
    db.conn.close()
