"""A project's prompt format ('chat' or 'continue') reaches generation, evaluation and SFT/DPO rows alike, and the
shipped movie task is a continuation task whose guidelines say so (issue 14 item 4)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from labeler.services.evals import evaluation
from labeler.services.serving import models
from labeler.services.data import projects, prompts
from labeler.errors import InputError
from labeler.services.evals.evaluation import EvalSettings
from labeler.services.serving.generation import generate_responses
from labeler.services.training.runners.common import policy_rows_options
from labeler.services.settings.job_settings import JobConfig
from rlhf.configs import GenerationSettings

GREEDY = GenerationSettings(max_new_tokens=5, do_sample=False)
WORDS = "eval_rewards:words"


def _library_answer(model_dir, prompt: str, use_chat_template) -> str:
    from rlhf.generation import build_prompt_ids, decode_responses, generate_batch
    from rlhf.loading import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    ids = build_prompt_ids(tokenizer, prompt, use_chat_template=use_chat_template)
    return decode_responses(tokenizer, generate_batch(load_causal_lm(model_dir), tokenizer, [ids], GREEDY))[0]


def test_the_two_formats_give_the_model_different_tokens(tiny_model_dir):
    from rlhf.generation import build_prompt_ids
    from rlhf.loading import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    chat = tokenizer.decode(build_prompt_ids(tokenizer, "The film opens", use_chat_template=None))
    plain = tokenizer.decode(build_prompt_ids(tokenizer, "The film opens", use_chat_template=False))
    assert plain == "The film opens"
    assert "<|im_start|>user" in chat and chat.rstrip().endswith("assistant")


def test_projects_store_and_validate_the_format(db):
    assert projects.get_project(db).prompt_format == "chat"
    created = projects.create_project(db, "movies", prompt_format="continue")
    assert (created.prompt_format, created.chat_template) == ("continue", False)
    assert projects.update_project(db, "movies", prompt_format="chat").chat_template is None
    with pytest.raises(InputError) as error:
        projects.update_project(db, "movies", prompt_format="poem")
    assert error.value.field == "prompt_format" and "poem" in str(error.value)
    assert projects.get_project(db, "movies").prompt_format == "chat"


def test_generation_renders_prompts_in_the_projects_format(db, tiny_model_dir):
    models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    projects.create_project(db, "movies", prompt_format="continue")
    for project in ("default", "movies"):
        prompts.add_prompts(db, ["I watched this film last night and"], project=project)
        generate_responses(db, project, "tiny", n_per_prompt=1, settings=GREEDY)
    rows = db.execute("SELECT pr.name, r.text, r.settings_json FROM responses r JOIN prompts p ON p.id = r.prompt_id"
                      " JOIN projects pr ON pr.id = p.project_id").fetchall()
    stored = {row["name"]: (row["text"], json.loads(row["settings_json"])["prompt_format"]) for row in rows}
    prompt = "I watched this film last night and"
    assert stored["default"] == (_library_answer(tiny_model_dir, prompt, None), "chat")
    assert stored["movies"] == (_library_answer(tiny_model_dir, prompt, False), "continue")


def test_evaluation_renders_prompts_in_the_projects_format_and_keeps_formats_apart(db, tiny_model_dir):
    models.register_model(db, "tiny", str(tiny_model_dir), "base")
    prompts.add_prompts(db, ["The trailer made it look like a comedy, but"])
    db.execute("UPDATE prompts SET split = 'test'")
    settings = EvalSettings(reward=WORDS, samples=1, max_new_tokens=5)
    chat = evaluation.evaluate_models(db, ["tiny"], settings)[0]
    projects.update_project(db, "default", prompt_format="continue")
    plain = evaluation.evaluate_models(db, ["tiny"], settings, reuse=["tiny"])[0]
    # Not reused across formats: the same model answers different token sequences.
    assert plain.id != chat.id
    assert (chat.settings["prompt_format"], plain.settings["prompt_format"]) == ("chat", "continue")

    from rlhf.evaluation import evaluate_policy
    from rlhf.generation import build_prompt_ids
    from rlhf.loading import load_causal_lm, load_tokenizer
    from eval_rewards import words

    tokenizer = load_tokenizer(tiny_model_dir)
    expected = evaluate_policy(load_causal_lm(tiny_model_dir), tokenizer, ["The trailer made it look like a comedy, but"],
                               words, samples=1, max_new_tokens=5,
                               build_query=lambda p: build_prompt_ids(tokenizer, p, use_chat_template=False))
    assert [row["answer"] for row in plain.samples] == [row["answer"] for row in expected.rows]


def test_policy_training_rows_are_conversations_only_for_chat_projects(db, tiny_model_dir):
    models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    ctx = SimpleNamespace(project="default", job=JobConfig(model="tiny"))
    assert policy_rows_options(ctx, db, "dpo").conversational is True  # the tiny tokenizer has a template
    projects.update_project(db, "default", prompt_format="continue")
    options = policy_rows_options(ctx, db, "sft", threshold=3.0)
    assert (options.conversational, options.threshold) == (False, 3.0)


def test_shipped_prompts_make_a_fresh_project_the_continuation_task(db):
    prompts.import_shipped_prompts(db)
    project = projects.get_project(db)
    assert project.prompt_format == "continue"
    assert project.guidelines_for("rating") == prompts.SHIPPED_GUIDELINES["rating"]
    assert project.guidelines_for("ranking") == prompts.SHIPPED_GUIDELINES["ranking"]
    assert "continuation" in project.guidelines_for("rating")


def test_shipped_prompts_keep_the_settings_of_a_project_in_use(db):
    projects.create_project(db, "own", guidelines="Rate the haiku.")
    prompts.add_prompts(db, ["Write a haiku"], project="own")
    prompts.import_shipped_prompts(db, "own")
    project = projects.get_project(db, "own")
    assert (project.prompt_format, project.guidelines) == ("chat", "Rate the haiku.")
    # A fresh project with guidelines of its own keeps them, and still becomes a continuation task.
    projects.create_project(db, "reviews", guidelines="Our own words.")
    prompts.import_shipped_prompts(db, "reviews")
    project = projects.get_project(db, "reviews")
    assert (project.prompt_format, project.guidelines) == ("continue", "Our own words.")


@pytest.mark.parametrize("prompt_format, expected", [("chat", None), ("continue", False)])
def test_ppo_rollouts_render_prompts_in_the_projects_format(db, tmp_path, tiny_model_dir, monkeypatch, prompt_format, expected):
    import rlhf.generation
    from labeler.services.training import jobs
    from labeler.services.execution import run_metrics, runs
    from labeler.worker import run_worker

    seen = []
    real = rlhf.generation.build_prompt_ids

    def recording(tokenizer, prompt, system_prompt=None, use_chat_template=None):
        seen.append(use_chat_template)
        return real(tokenizer, prompt, system_prompt, use_chat_template)

    monkeypatch.setattr(rlhf.generation, "build_prompt_ids", recording)  # run_ppo imports it when it starts
    projects.update_project(db, "default", prompt_format=prompt_format)
    prompts.add_prompts(db, ["The first scene", "The ending"])
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 1, "reward": "function", "batch_size": 2,
                                      "answers_per_prompt": 1, "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 3,
                                      "checkpoint_every": 0, "eval_samples": 0},
                          runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))
    assert seen and set(seen) == {expected}
