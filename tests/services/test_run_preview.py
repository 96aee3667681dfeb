"""What a run will use, before it is launched (issue 14 item 9): rows after filters, split, epochs, base model."""
from __future__ import annotations

import pytest
from export_fixtures import build_labelled_db

from labeler.errors import InputError
from labeler.services.training.run_preview import preview_run


@pytest.fixture
def labelled(db):
    build_labelled_db(db)
    return db


def test_reward_model_preview_counts_pairs_and_epochs_like_the_trainer(labelled):
    preview = preview_run(labelled, "default", "rm", {"steps": 10}, estimate_time=False)
    # export_fixtures: 4 ranking pairs (majority per pair, ties dropped, plus the import); its 3 rating pairs order
    # the same answers the same way, and the export lists a pair once: 4.
    assert (preview.unit, preview.rows, preview.train_rows, preview.eval_rows) == ("pairs", 4, 4, 0)
    # Batch 8 > 4 rows: every step is a whole pass, so 10 steps are 10 epochs.
    assert (preview.rows_per_step, preview.epochs) == (8, 10.0)
    assert preview.base_model == "default" and preview.base_model_known
    assert "10.0 passes over 4 pairs" in preview.warnings[0] and "lower steps to about 3" in preview.warnings[0]
    assert "**10.0 epochs**" in preview.markdown() and "⚠️" in preview.markdown()


def test_filters_change_the_count(labelled):
    assert preview_run(labelled, "default", "rm", {"include_rating_pairs": False}, estimate_time=False).rows == 4
    # carol's one ranking [[3], [1], [2]] is 3 pairs: 3>1, 3>2, 1>2.
    assert preview_run(labelled, "default", "rm", {"annotators": "carol", "include_rating_pairs": False}, estimate_time=False).rows == 3
    # Project 'other': alice's [[6], [7]] only.
    few = preview_run(labelled, "other", "dpo", {"include_rating_pairs": False})
    assert few.warnings == ["only 1 pairs with these filters: the run would stop at once (it needs at least 2)."]


def test_batch_size_and_accumulation(labelled):
    # 4 rows, batch 2: 2 batches per epoch; accumulating 2 makes 1 optimizer step per epoch: 3 steps = 3 epochs.
    preview = preview_run(labelled, "default", "dpo", {"steps": 3, "per_device_train_batch_size": 2,
                                                        "gradient_accumulation_steps": 2}, estimate_time=False)
    assert (preview.rows, preview.rows_per_step, preview.epochs, preview.warnings) == (4, 4, 3.0, [])


def weights_only(tmp_path) -> str:
    """A model folder the preview cannot size: weights, no config (a folder is a model it accepts, unregistered)."""
    folder = tmp_path / "weights-only"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    return str(folder)


def test_sft_counts_well_rated_answers_and_ppo_counts_training_prompts(labelled, tmp_path):
    folder = weights_only(tmp_path)
    sft = preview_run(labelled, "default", "sft", {"steps": 1, "model": folder})
    # Mean scores on 1..7 (midpoint 4): response 1 6.5, 2 3.0, 3 4.0, 4 5.0 -> 3 at or above the midpoint.
    assert (sft.unit, sft.rows, sft.base_model, sft.base_model_known) == ("answers", 3, folder, False)
    ppo = preview_run(labelled, "default", "ppo", {"steps": 2, "batch_size": 8, "mini_batch_size": 4,
                                                    "answers_per_prompt": 4}, estimate_time=False)
    # 2 training prompts in `default`; 8 rollouts of 4 answers per prompt are 2 prompts per step -> 2 epochs.
    assert (ppo.unit, ppo.rows, ppo.rows_per_step, ppo.epochs) == ("prompts", 2, 2, 2.0)


def test_bad_settings_are_refused_like_a_launch(labelled):
    with pytest.raises(InputError) as error:
        preview_run(labelled, "default", "rm", {"stepz": 3}, estimate_time=False)
    assert error.value.field == "stepz"


def test_kto_counts_every_rated_answer_and_warns_when_one_label_is_missing(labelled):
    def no_measurement(settings):
        raise AssertionError("a kto run has no wall-time estimate")

    kto = preview_run(labelled, "default", "kto", {"steps": 4, "test_size": 0}, measure=no_measurement)
    # Mean scores 6.5, 3.0, 4.0, 5.0 against the midpoint 4: 3 desirable and 1 undesirable, all trained on.
    assert (kto.unit, kto.rows, kto.train_rows, kto.eval_rows, kto.estimate) == ("answers", 4, 4, 0, None)
    # batch 8 > 4 rows: each step is a whole pass, 4 steps = 4 epochs
    assert (kto.rows_per_step, kto.epochs) == (8, 4.0)
    one_sided = preview_run(labelled, "default", "kto", {"steps": 1, "test_size": 0, "sft_min_score": 1})
    assert one_sided.warnings == ["the run would stop at once: all 4 rated answers are desirable with this threshold; "
                                  "KTO needs both (change sft_min_score or rate more)."]


def test_grpo_and_rloo_count_training_prompts_like_ppo(labelled):
    # 2 training prompts in `default`; a generation batch of 8 answers, 4 per prompt: 2 prompts a step.
    for stage in ("grpo", "rloo"):
        preview = preview_run(labelled, "default", stage, {"steps": 3, "per_device_train_batch_size": 4,
                                                            "steps_per_generation": 2}, estimate_time=False)
        assert (preview.unit, preview.rows, preview.eval_rows, preview.rows_per_step, preview.epochs) == \
            ("prompts", 2, 0, 2, 3.0), stage


def test_memory_estimate_for_the_chosen_model_and_a_recipe_for_its_size(labelled, tmp_path):
    """The preview (train --dry-run, the Train tab) says how much memory the run takes, from the model's config
    alone: a 1.5B-shape Qwen2 folder with no weights is enough, and its size suggests recipe 1.5b."""
    from transformers import Qwen2Config

    from labeler.services.training import run_settings
    from labeler.services.training.run_estimate import train_shape
    from rlhf.memory_estimate import GIB, estimate_training_memory, model_shape

    folder = tmp_path / "qwen-1.5b-shape"
    Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True,
                architectures=["Qwen2ForCausalLM"]).save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"")  # a folder the run could load (the estimate reads the config)
    preview = preview_run(labelled, "default", "ppo", {"model": str(folder), "batch_size": 8, "mini_batch_size": 4,
                                                        "answers_per_prompt": 4}, estimate_time=False)
    shape = model_shape(str(folder))
    assert 1.5e9 < shape.parameters < 1.6e9 and shape.vocab_size == 151936
    resolved = run_settings.resolve_run(labelled, "default", "ppo", {"model": str(folder), "batch_size": 8,
                                                                     "mini_batch_size": 4, "answers_per_prompt": 4})
    run = train_shape("ppo", resolved.job, resolved.trainer_config(), "cpu")  # the project's answer length
    assert (run.rows, run.tokens, run.logit_tokens, run.lora_r, run.load_bytes, run.reference) == (
        4, 64 + 128, 128, 0, 4, True)  # a chat project's 128-token answers
    expected = estimate_training_memory(shape, run).total / GIB
    assert f"**Memory: about {expected:.1f} GiB**" in preview.markdown()
    assert "1.54B parameters, vocabulary 151,936" in preview.memory
    assert "--set recipe=1.5b" in preview.memory
    # full fine-tuning of 1.5B: 16 bytes a parameter (fp32 weights, gradients, Adam) + the reference, > 23 GiB
    assert expected > 1.54e9 * 20 / GIB
    # with LoRA the base is held in the compute dtype and only adapters train: far less
    lora = preview_run(labelled, "default", "ppo", {"model": str(folder), "batch_size": 8, "mini_batch_size": 4,
                                                     "answers_per_prompt": 4, "lora": True, "recipe": "1.5b"},
                       estimate_time=False)
    assert float(lora.memory.split("about ")[1].split(" GiB")[0]) < expected / 3
    assert "recipe=" not in lora.memory  # the recipe asked for is the one suggested


def test_memory_line_says_when_there_is_no_estimate(labelled, tmp_path):
    preview = preview_run(labelled, "default", "sft", {"steps": 1, "model": weights_only(tmp_path)})
    assert preview.memory.startswith("No memory estimate:")


def test_recipes_give_size_settings_and_explicit_settings_win():
    from labeler.services.training.train_configs import recipe_for_parameters, resolve_run_config

    config = resolve_run_config("ppo", {"recipe": "8b", "learning_rate": 1e-4})
    assert config["job"]["lora"] is True and config["job"]["max_new_tokens"] == 128
    # (horizon and kl_coef_min: PPO's app defaults, stored with the run since issue 35)
    assert config["trainer"] == {"learning_rate": 1e-4, "mini_batch_size": 4, "gradient_accumulation_steps": 4,
                                 "gradient_checkpointing": True, "horizon": 64, "kl_coef_min": 0.03}
    grpo = resolve_run_config("grpo", {"recipe": "1.5b"})["trainer"]
    assert (grpo["per_device_train_batch_size"], grpo["steps_per_generation"], grpo["learning_rate"]) == (8, 8, 1e-6)
    assert resolve_run_config("dpo", {"recipe": "3b"})["trainer"]["learning_rate"] == 5e-6  # LoRA's rate
    assert [recipe_for_parameters(n) for n in (135e6, 494e6, 1.54e9, 3.1e9, 8e9)] == ["", "0.5b", "1.5b", "3b", "8b"]
    with pytest.raises(InputError) as error:
        resolve_run_config("ppo", {"recipe": "70b"})
    assert error.value.field == "recipe"


def test_qlora_without_lora_is_refused_when_queued():
    from labeler.services.training.train_configs import resolve_run_config

    with pytest.raises(InputError) as error:
        resolve_run_config("dpo", {"load_in_4bit": True})
    assert error.value.field == "load_in_4bit" and "set lora=true too" in error.value.message
    # max_length: no project, so the job's answer length (16) + the prompt budget 256 + 8 (fitted_max_length)
    assert resolve_run_config("dpo", {"load_in_4bit": True, "lora": True})["trainer"] == {"load_in_4bit": True,
                                                                                          "max_length": 280}
def test_the_estimate_says_it_assumes_an_idle_machine_and_names_the_load():
    """Issue 37 item 9: ~5 min estimated, 34 min taken at load 7-18 (the worker runs niced)."""
    from labeler.services.training.run_preview import idle_machine_note

    assert idle_machine_note(0.4, 2) == ("It assumes an otherwise idle machine: training runs at a lower priority "
                                         "than other work.")
    busy = idle_machine_note(7.0, 2)
    assert "the load now is 7.0 on 2 cores" in busy and "several times longer" in busy


def test_a_run_that_reads_under_half_its_labels_says_so(labelled):
    # 4 pairs, batch 1: 4 steps a pass. One step reads a quarter of them (on the example tasks, DPO's 40 default
    # steps of 4 read 160 of 480 pairs and stayed near the base; bench/own_task.py).
    preview = preview_run(labelled, "default", "dpo", {"steps": 1, "per_device_train_batch_size": 1}, estimate_time=False)
    assert preview.epochs == 0.25
    assert preview.warnings == ["1 steps of 1 pairs read 1 of the 4 training pairs: most of the labels go unused. "
                                "For one pass over them set steps to about 4."]
    # Half a pass or more: no warning.
    assert preview_run(labelled, "default", "dpo", {"steps": 2, "per_device_train_batch_size": 1}, estimate_time=False).warnings == []


def test_the_preview_names_the_settings_the_app_gives_a_run(labelled):
    """The Train form shows the trainer's own defaults; a PPO run ranked by people gets the app's learning rate
    instead, and the preview says so. A value the user or a recipe set is theirs, not the app's."""
    shape = {"batch_size": 8, "mini_batch_size": 4, "answers_per_prompt": 4}
    ranked = preview_run(labelled, "default", "ppo", {**shape, "reward": "mix"}, estimate_time=False)
    assert ranked.app_settings == {"horizon": 8, "kl_coef_min": 0.03, "learning_rate": 4.5e-5}  # horizon: the batch
    assert ("from the app, the project or the recipe (set them to change them): KL horizon (rollouts): 8 (app "
            "default); Lowest KL weight: 0.03 (app default); Learning rate: 4.5e-05 (app default); Answer length (new "
            "tokens): 128 (project).") in ranked.markdown()
    by_function = preview_run(labelled, "default", "ppo", {**shape, "reward": "function"}, estimate_time=False)
    assert by_function.app_settings == {"horizon": 8, "kl_coef_min": 0.03}
    chosen = preview_run(labelled, "default", "ppo", {**shape, "reward": "mix", "learning_rate": 1e-5, "horizon": 128},
                         estimate_time=False)
    assert chosen.app_settings == {"kl_coef_min": 0.03}
    by_recipe = preview_run(labelled, "default", "ppo", {**shape, "reward": "mix", "recipe": "0.5b"},
                            estimate_time=False)
    assert "learning_rate" not in by_recipe.app_settings  # the recipe's own rate
    # DPO's full fine-tuning gets the app's learning rate; LoRA and a rate set by the user keep their own
    # (max_length: the prompt budget 256 + the project's 128-token answers + 8, whatever the learning rate)
    fitted = {"max_length": 392}
    assert preview_run(labelled, "default", "dpo", {"steps": 3}, estimate_time=False).app_settings == {"learning_rate": 3e-5, **fitted}
    assert preview_run(labelled, "default", "dpo", {"steps": 3, "lora": True}, estimate_time=False).app_settings == fitted
    assert preview_run(labelled, "default", "dpo", {"steps": 3, "learning_rate": 1e-6}, estimate_time=False).app_settings == fitted


def test_a_reward_model_run_without_steps_makes_three_passes_over_its_pairs_and_dpo_one(labelled, tmp_path):
    from labeler.services.training import jobs

    # 4 pairs (above), all for training (an eval side would have fewer than 2): rm's batch of 8 reads them in one
    # step, three passes; DPO's batch of 4 in one step, and its batch of 2 in ceil(4 / 2) = 2.
    assert preview_run(labelled, "default", "rm", {}, estimate_time=False).steps == 3
    assert preview_run(labelled, "default", "dpo", {"per_device_train_batch_size": 2}, estimate_time=False).steps == 2
    run = jobs.create_run(labelled, "dpo", {"per_device_train_batch_size": 2}, runs_dir=tmp_path, start=False)
    assert run.config["job"]["steps"] == 2  # stored with the run: it keeps its steps if more labels arrive
    # epochs asked for are passes: 3 x 2 steps (steps are the trainer's max_steps, which would cut them to one)
    assert preview_run(labelled, "default", "dpo", {"per_device_train_batch_size": 2, "num_train_epochs": 3}, estimate_time=False).steps == 6
    assert preview_run(labelled, "default", "rm", {"num_train_epochs": 2}, estimate_time=False).steps == 2
    # steps asked for are kept, the job's own default of 40 too; SFT and PPO keep the job's default of 40
    assert preview_run(labelled, "default", "dpo", {"steps": 40}, estimate_time=False).steps == 40
    assert jobs.create_run(labelled, "rm", {"steps": 40}, runs_dir=tmp_path, start=False).config["job"]["steps"] == 40
    assert preview_run(labelled, "default", "sft", {"model": weights_only(tmp_path)}).steps == 40
    assert preview_run(labelled, "default", "ppo", {}, estimate_time=False).steps == 40


def test_an_answer_length_asked_for_at_the_jobs_default_is_not_the_projects(db, tmp_path):
    from labeler.services.training import jobs
    from labeler.services.data import projects

    projects.create_project(db, "support", prompt_format="chat", answer_tokens=128)
    # 16 is the job's own default: asked for, it must not be taken for "unset" and become the project's 128
    asked = jobs.create_run(db, "ppo", {"max_new_tokens": 16}, project="support", runs_dir=tmp_path, start=False)
    unset = jobs.create_run(db, "ppo", {}, project="support", runs_dir=tmp_path, start=False)
    assert (asked.config["job"]["max_new_tokens"], unset.config["job"]["max_new_tokens"]) == (16, 128)
