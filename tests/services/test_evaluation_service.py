"""Held-out prompts, the split by prompt of the trainers' eval set, and the evaluation service on tiny models:
what is stored, what KL is measured against, bad input, and the automatic evaluation of a finished run."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from labeler.services.evals import evaluation
from labeler.services.serving import models
from labeler.services.data import projects, prompts
from labeler.errors import InputError
from labeler.services.evals.evaluation import EvalSettings
from labeler.services.training.runners.common import split_rows
from labeler.services.settings.job_settings import JobConfig

WORDS = "eval_rewards:words"


# ---- held-out prompts and the split by prompt ---------------------------------------------------------------

def test_shipped_prompts_hold_out_every_fifth_line(db):
    lines = prompts.SHIPPED_PROMPTS.read_text(encoding="utf-8").splitlines()
    prompts.import_shipped_prompts(db)
    split = {row[0]: row[1] for row in db.execute("SELECT text, split FROM prompts")}
    expected_test = [line for i, line in enumerate(lines) if i % 5 == 4]
    assert len(lines) == 135 and len(expected_test) == 27
    assert sorted(t for t, s in split.items() if s == "test") == sorted(expected_test)
    assert sum(s == "train" for s in split.values()) == 108
    assert evaluation.heldout_prompts(db) == expected_test  # oldest first = file order


def test_split_rows_keeps_each_prompt_on_one_side():
    # 12 prompts with 3 preference pairs each (a ranking of 3 answers gives 3 pairs).
    rows = [{"prompt": f"prompt {p}", "chosen": f"good {p}.{k}", "rejected": f"bad {p}.{k}"}
            for p in range(12) for k in range(3)]
    train, test = split_rows(rows, test_size=0.25, seed=3)
    train_prompts = {json.dumps(r["prompt"]) for r in train}
    test_prompts = {json.dumps(r["prompt"]) for r in test}
    assert train_prompts and test_prompts and not train_prompts & test_prompts
    assert len(train) + len(test) == len(rows)
    assert len(test) >= round(0.25 * len(rows))  # whole prompts until the target is reached
    # Seeded: the same split again.
    assert list(split_rows(rows, 0.25, 3)[1]["chosen"]) == list(test["chosen"])


def test_split_rows_groups_conversational_prompts_by_their_messages():
    rows = [{"prompt": [{"role": "user", "content": f"chat {p}"}], "chosen": f"a{k}", "rejected": "b"}
            for p in range(6) for k in range(2)]
    train, test = split_rows(rows, test_size=0.3, seed=0)
    assert not {json.dumps(r["prompt"]) for r in train} & {json.dumps(r["prompt"]) for r in test}
    assert len(test) % 2 == 0 and len(test) >= 4


def test_split_rows_without_enough_rows_has_no_eval():
    rows = [{"prompt": "only one", "chosen": "a", "rejected": "b"}] * 4
    train, test = split_rows(rows, test_size=0.5, seed=0)
    assert test is None and len(train) == 4


# ---- the service on tiny models -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tuned_model_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model with perturbed weights: a 'trained' policy whose KL to the tiny base is not zero."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("tuned")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def _heldout(db, texts=("The film was", "I watched it and", "Honestly, the plot")):
    prompts.add_prompts(db, ["A training prompt"])
    prompts.add_prompts(db, list(texts))
    db.execute(f"UPDATE prompts SET split = 'test' WHERE text IN ({', '.join('?' * len(texts))})", list(texts))
    return list(texts)


def test_evaluate_models_stores_metrics_answers_and_kl_to_the_base(db, tiny_model_dir, tuned_model_dir):
    texts = _heldout(db)
    models.register_model(db, "tiny-base", str(tiny_model_dir), "base")
    models.register_model(db, "tuned", str(tuned_model_dir), "policy", base_model="tiny-base")
    settings = EvalSettings(reward=WORDS, samples=2, max_new_tokens=5)
    base, tuned = evaluation.evaluate_models(db, ["tiny-base", "tuned"], settings)

    assert (base.model, base.kl_base, tuned.model, tuned.kl_base) == ("tiny-base", "tiny-base", "tuned", "tiny-base")
    for ev in (base, tuned):
        assert [row["prompt"] for row in ev.samples] == [t for t in texts for _ in range(2)]
        rewards = [len(row["answer"].split()) / 4 for row in ev.samples]
        assert [row["reward"] for row in ev.samples] == pytest.approx(rewards)
        assert ev.metrics["eval/reward_mean"] == pytest.approx(sum(rewards) / 6)
        assert ev.metrics["eval/positive_share"] == pytest.approx(sum(r > 0.5 for r in rewards) / 6)
        assert ev.metrics["eval/length_mean"] == pytest.approx(sum(row["length"] for row in ev.samples) / 6)
        assert 1 <= ev.metrics["eval/length_mean"] <= 5
        assert (ev.metrics["eval/prompts"], ev.metrics["eval/samples"]) == (3, 2)
    # A base model is its own reference; the tuned one is measured against its registered base.
    assert base.metrics["eval/kl"] == 0.0 and {row["kl"] for row in base.samples} == {0.0}
    assert tuned.metrics["eval/kl"] == pytest.approx(sum(row["kl"] for row in tuned.samples) / 6)
    assert tuned.metrics["eval/kl"] != 0.0
    # Both stored with equal settings, so they are comparable; the settings name the prompts by hash.
    stored = evaluation.list_evaluations(db)
    assert [e.id for e in stored] == [tuned.id, base.id]
    assert stored[0].settings == stored[1].settings
    assert stored[0].settings["prompts_n"] == 3 and stored[0].settings["reward"] == WORDS
    assert stored[0].samples == tuned.samples


def test_reuse_returns_the_stored_evaluation_of_equal_settings(db, tiny_model_dir):
    _heldout(db)
    settings = EvalSettings(reward=WORDS, samples=1, max_new_tokens=3)
    first = evaluation.evaluate_models(db, [str(tiny_model_dir)], settings)[0]
    again = evaluation.evaluate_models(db, [str(tiny_model_dir)], settings, reuse=[str(tiny_model_dir)])[0]
    assert again.id == first.id
    other = evaluation.evaluate_models(db, [str(tiny_model_dir)], EvalSettings(reward=WORDS, samples=1, max_new_tokens=3,
                                                                                seed=1), reuse=[str(tiny_model_dir)])[0]
    assert other.id != first.id
    assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 2


def test_prompts_from_a_file(db, tmp_path, tiny_model_dir):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "One"}\n{"messages": [{"role": "user", "content": "Two"}]}\n', encoding="utf-8")
    ev = evaluation.evaluate_models(db, [str(tiny_model_dir)], EvalSettings(prompts=str(path), reward=WORDS, samples=1,
                                                                            max_new_tokens=2))[0]
    assert [row["prompt"] for row in ev.samples] == ["One", "Two"]
    assert ev.settings["prompts"] == str(path)


@pytest.mark.parametrize("kwargs, field, words", [
    ({"names": ["no-such-model"]}, "model", "no model named 'no-such-model'"),
    ({"settings": EvalSettings(reward="sentiment")}, "reward", "unknown reward 'sentiment': use rm, rm:NAME, "),
    ({"settings": EvalSettings(reward="rm:nothing")}, "reward", "nothing"),
    ({"settings": EvalSettings(reward="eval_rewards:missing")}, "reward", "missing"),
    ({"settings": EvalSettings(reward="eval_rewards:NOT_A_FUNCTION")}, "reward", "not a function"),
    ({"settings": EvalSettings(prompts="/no/such/file.jsonl")}, None, "file not found"),
])
def test_bad_input_is_an_input_error(db, kwargs, field, words):
    _heldout(db)
    call = {"names": ["default"], "settings": EvalSettings(), **kwargs}
    with pytest.raises(InputError) as error:
        evaluation.evaluate_models(db, call["names"], call["settings"])
    assert error.value.field == field and words in str(error.value)


def test_no_heldout_prompts_and_bad_settings(db):
    prompts.add_prompts(db, ["only training"])
    with pytest.raises(InputError, match="no held-out prompts") as error:
        evaluation.evaluate_models(db, ["default"], EvalSettings())
    assert error.value.field == "prompts"
    with pytest.raises(InputError) as error:
        EvalSettings(samples=0)
    assert error.value.field == "samples"


def test_a_reward_model_is_not_evaluated_as_a_policy(db, tiny_encoder_dir):
    _heldout(db)
    models.register_model(db, "rm-x", str(tiny_encoder_dir), "reward")
    with pytest.raises(InputError, match="reward model") as error:
        evaluation.evaluate_models(db, ["rm-x"], EvalSettings())
    assert error.value.field == "model"


# ---- the automatic evaluation of a finished run ---------------------------------------------------------

class _Sink:
    def __init__(self):
        self.logged = []

    def log(self, step, stats):
        self.logged.append((step, stats))


def _finished_run(db, stage="ppo"):
    return db.execute("INSERT INTO runs (project_id, stage, status, step, total_steps) VALUES (1, ?, 'running', 7, 7)",
                      [stage]).lastrowid


def test_finished_run_is_evaluated_against_its_base_and_logged(db, tiny_model_dir, tuned_model_dir):
    _heldout(db)
    run_id = _finished_run(db)
    model = models.register_model(db, "ppo-run1", str(tuned_model_dir), "policy", base_model=str(tiny_model_dir),
                                  run_id=run_id)
    job = JobConfig(reward="function", reward_function=WORDS, eval_samples=2, max_new_tokens=4)
    sink, lines = _Sink(), []
    after = evaluation.evaluate_finished_run(db, run_id, "ppo", "default", job, model, sink=sink, log=lines.append)
    assert (after.model, after.run_id, after.kl_base) == ("ppo-run1", run_id, str(tiny_model_dir))
    assert after.settings["reward"] == WORDS and after.settings["samples"] == 2 and after.settings["max_new_tokens"] == 4
    assert sink.logged == [(7, after.metrics)] and "eval/positive_share" in after.metrics
    before, again = evaluation.run_comparison(db, run_id)
    assert again.id == after.id and before.model == str(tiny_model_dir) and before.settings == after.settings
    rows = evaluation.comparison_rows([before, after], ["before", "after"])
    assert [r[""] for r in rows] == ["before", "after"] and rows[0]["KL to base"] == 0.0
    assert any(line.startswith(f"evaluation (function {WORDS}): mean score") for line in lines)
    # Its base was evaluated first with the same settings: the model's answers are compared with the base's.
    assert 0 <= after.metrics["eval/win_low"] <= after.metrics["eval/win_rate"] <= after.metrics["eval/win_high"] <= 1
    assert "eval/win_rate" not in before.metrics

    # A second run on the same base reuses the base's evaluation (its weights never change).
    run2 = _finished_run(db, "dpo")
    model2 = models.register_model(db, "dpo-run2", str(tuned_model_dir), "policy", base_model=str(tiny_model_dir),
                                   run_id=run2)
    evaluation.evaluate_finished_run(db, run2, "dpo", "default", job, model2, log=lines.append)
    assert evaluation.run_comparison(db, run2)[0].id == before.id
    assert db.execute("SELECT COUNT(*) FROM evaluations WHERE model = ?", [str(tiny_model_dir)]).fetchone()[0] == 1


def test_auto_evaluation_reward_and_skips(db, tiny_model_dir):
    # The project's measure; without one (no measure set, no reward model trained on it) a function-rewarded run
    # is scored by its function, any other by nothing (KL, length and diversity only).
    assert evaluation.auto_settings(db, "default", JobConfig(reward="rm")).reward == ""
    assert evaluation.auto_settings(db, "default", JobConfig(reward="function", reward_function=WORDS)).reward == WORDS
    projects.update_project(db, "default", measure="vader")
    assert evaluation.auto_settings(db, "default", JobConfig(reward="rm")).reward == "vader"
    assert evaluation.auto_settings(db, "default", JobConfig(reward="function", reward_function=WORDS)).reward == "vader"
    model = {"name": "m", "kind": "policy"}
    lines = []
    job = JobConfig()
    assert evaluation.evaluate_finished_run(db, 1, "rm", "default", job, {"name": "r", "kind": "reward"}) is None
    assert evaluation.evaluate_finished_run(db, 1, "ppo", "default", job, model, log=lines.append) is None
    assert len(lines) == 1 and lines[0].startswith("evaluation: skipped, project 'default' has no held-out prompts")
    _heldout(db)
    off = JobConfig(eval_samples=0)
    assert evaluation.evaluate_finished_run(db, 1, "sft", "default", off, model, log=lines.append) is None
    assert lines[-1] == "evaluation: off (eval_samples=0)"
    assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 0


def test_report_shows_every_model_and_answers_side_by_side(db, tiny_model_dir, tuned_model_dir):
    _heldout(db)
    models.register_model(db, "tuned", str(tuned_model_dir), "policy", base_model=str(tiny_model_dir))
    results = evaluation.evaluate_models(db, [str(tiny_model_dir), "tuned"], EvalSettings(reward=WORDS, samples=2,
                                                                                          max_new_tokens=3))
    text = evaluation.format_report(results, examples=2)
    assert "3 prompts (heldout) x 2 samples" in text
    assert "tuned" in text and "(itself)" in text and "The film was" in text and "I watched it and" in text
    assert "Honestly" not in text  # only 2 examples
    assert f"stored as evaluation #{results[0].id}, #{results[1].id}" in text


def test_a_finished_ppo_run_is_evaluated_by_its_worker(db, tmp_path, tiny_model_dir, capsys):
    """The worker's own path: train, register, evaluate against the base on split 'test', log eval/... ."""
    from labeler.services.training import jobs
    from labeler.services.execution import run_metrics, runs
    from labeler.worker import run_worker

    _heldout(db)
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 1, "reward": "function",
                                      "reward_function": WORDS, "batch_size": 2, "answers_per_prompt": 1, "mini_batch_size": 2,
                                      "ppo_epochs": 1, "max_new_tokens": 3, "checkpoint_every": 0,
                                      "eval_samples": 2}, runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))
    before, after = evaluation.run_comparison(db, run.id)
    assert (after.model, after.run_id, after.kl_base) == (f"ppo-run{run.id}", run.id, str(tiny_model_dir))
    assert before.model == str(tiny_model_dir) and before.settings == after.settings
    assert after.settings["reward"] == WORDS and after.settings["samples"] == 2
    assert len(after.samples) == 3 * 2
    frame = run_metrics.metrics_frame(db, run.id, ["eval/positive_share", "eval/kl", "eval/distinct_2"])
    assert sorted(frame["name"]) == ["eval/distinct_2", "eval/kl", "eval/positive_share"]
    assert set(frame["step"]) == {1}
    assert f"run {run.id}: evaluation (function {WORDS}): mean score" in capsys.readouterr().out  # the run log is stdout


def test_reward_curve_is_the_reward_against_minutes_since_the_start(db):
    run_id = db.execute("INSERT INTO runs (project_id, stage, started_at) VALUES (1, 'ppo', '2025-01-01T10:00:00.000000Z')"
                        ).lastrowid
    for step, value, at in [(2, 0.5, "2025-01-01T10:03:00.000Z"), (1, 0.1, "2025-01-01T10:01:30.000Z")]:
        db.execute("INSERT INTO metrics (run_id, step, name, value, created_at) VALUES (?, ?, 'env/reward_mean', ?, ?)",
                   [run_id, step, value, at])
    db.execute("INSERT INTO metrics (run_id, step, name, value) VALUES (?, 1, 'objective/kl', 9.0)", [run_id])
    frame = evaluation.reward_curve(db, run_id)
    assert frame.to_dict("list") == {"minutes": [1.5, 3.0], "reward": [0.1, 0.5]}
    assert len(evaluation.reward_curve(db, run_id, "missing")) == 0


def test_a_lora_adapter_is_evaluated_on_its_base(db, tmp_path, tiny_model_dir):
    """An adapter folder (SFT/DPO with lora=true register one) is loaded on its base and merged for sampling."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    _heldout(db)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
    torch.manual_seed(0)
    peft_model.save_pretrained(tmp_path / "adapter")
    models.register_model(db, "sft-lora", str(tmp_path / "adapter"), "adapter", base_model=str(tiny_model_dir))
    ev = evaluation.evaluate_models(db, ["sft-lora"], EvalSettings(reward=WORDS, samples=1, max_new_tokens=3))[0]
    assert (ev.model, ev.kl_base) == ("sft-lora", str(tiny_model_dir)) and len(ev.samples) == 3
    assert ev.metrics["eval/kl"] != 0.0  # random LoRA weights: not the base


def test_people_judge_a_run_blind_and_its_page_fills_in(db, tiny_model_dir, tuned_model_dir):
    """Issue 33: measure `people`: the finished run's and its base's answers to each held-out prompt become one
    blind ranking of two for annotators; their rankings give the run's win rate as they come in."""
    from labeler.services.data import accounts, labeling
    from labeler.services.evals import people_eval

    texts = _heldout(db)
    projects.update_project(db, "default", measure="people")
    run_id = _finished_run(db)
    model = models.register_model(db, "ppo-run1", str(tuned_model_dir), "policy", base_model=str(tiny_model_dir),
                                  run_id=run_id)
    lines = []
    after = evaluation.evaluate_finished_run(db, run_id, "ppo", "default", JobConfig(eval_samples=2, max_new_tokens=3),
                                             model, log=lines.append)
    assert after.settings["reward"] == "people" and "eval/reward_mean" not in after.metrics
    assert any(line.startswith(f"evaluation: {len(texts)} blind comparisons") for line in lines)
    assert people_eval.people_win_rate(db, run_id, "ppo-run1") is None  # nobody has ranked yet
    accounts.create_user(db, "ann", "a long enough password")
    outcomes = []
    for want in ("model", "base", "tie"):
        item = labeling.next_item(db, "default", "ann", "ranking")
        assert len(item.responses) == 2 and item.prompt in texts  # a held-out prompt, only for this comparison
        by_model = {r["model"]: r["id"] for r in item.responses}
        tuned, base = by_model["ppo-run1"], by_model[str(tiny_model_dir)]
        order = {"model": [[tuned], [base]], "base": [[base], [tuned]], "tie": [[tuned, base]]}[want]
        labeling.submit_ranking(db, "default", "ann", item.item_id, order)
        outcomes.append(want)
    result = people_eval.people_win_rate(db, run_id, "ppo-run1")
    assert (result.wins, result.ties, result.losses, result.prompts) == (1, 1, 1, 3)
    assert result.rate == pytest.approx((1 + 0.5) / 3)
    # Re-evaluating the same run queues nothing twice.
    assert people_eval.queue_comparisons(db, "default", run_id, "b", "ppo-run1", after.samples, after.samples, 2) == 0


def test_pair_outcome_by_hand():
    from labeler.services.evals.people_eval import pair_outcome

    assert pair_outcome([[7], [3]], model_response=7, base_response=3) == 1.0
    assert pair_outcome([[3], [7]], model_response=7, base_response=3) == 0.0
    assert pair_outcome([[3, 7]], model_response=7, base_response=3) == 0.5
    assert pair_outcome([[3]], model_response=7, base_response=3) is None


def test_eval_of_a_tuned_model_evaluates_its_base_and_reports_the_win_rate(db, tiny_model_dir, tuned_model_dir):
    _heldout(db)
    models.register_model(db, "tuned", str(tuned_model_dir), "policy", base_model=str(tiny_model_dir))
    base, tuned = evaluation.evaluate_models(db, ["tuned"], EvalSettings(reward=WORDS, samples=2, max_new_tokens=3),
                                             with_bases=True)
    assert (base.model, tuned.model) == (str(tiny_model_dir), "tuned")
    # By hand from the stored answers: every answer of the model against every answer of the base to the same
    # prompt (rows grouped by prompt, 2 a prompt: 4 pairs a prompt), the mean of the prompts' shares.
    shares = []
    for first in range(0, len(tuned.samples), 2):
        pairs = [(m["reward"], b["reward"]) for m in tuned.samples[first:first + 2] for b in base.samples[first:first + 2]]
        shares.append(sum(1.0 if m > b else 0.5 if m == b else 0.0 for m, b in pairs) / 4)
    expected = sum(shares) / len(shares)
    assert tuned.metrics["eval/win_pairs"] == 12
    assert tuned.metrics["eval/win_rate"] == pytest.approx(expected)
    text = evaluation.format_report([base, tuned])
    assert "win rate vs base" in text and f"{expected:4.0%}" in text
    # Asked again, the base's evaluation is reused, not redone.
    again = evaluation.evaluate_models(db, ["tuned"], EvalSettings(reward=WORDS, samples=2, max_new_tokens=3),
                                       with_bases=True)
    assert again[0].id == base.id


def test_cut_answers_are_a_warning_only_where_answers_are_meant_to_end():
    """A chat project's answers that fill the answer length are cut mid-sentence: warned. A continuation (the
    shipped task's review openings, prompt format 'continue') runs to the limit by design: no warning."""
    def stored(prompt_format: str, share: float) -> evaluation.Evaluation:
        return evaluation.Evaluation(id=1, model="ppo-run1", kl_base="default", run_id=1,
                                     settings={"prompt_format": prompt_format, "max_new_tokens": 16},
                                     metrics={"eval/truncated_share": share}, samples=[], created_at="")

    assert evaluation.answers_were_cut(stored("chat", 0.9))
    assert not evaluation.answers_were_cut(stored("chat", 0.4))  # under TRUNCATED_WARNING (half)
    assert not evaluation.answers_were_cut(stored("continue", 1.0))
    assert "90% of the answers were cut at the answer length (16 tokens)" in evaluation.truncation_warning(
        stored("chat", 0.9))


def test_one_model_in_memory_at_a_time_and_the_base_answers_are_reused(db, tiny_model_dir, tuned_model_dir,
                                                                       monkeypatch):
    """The tuned model is loaded alone (its answers and log-probs taken, then released) and its base after it for
    KL; a later evaluation under another measure scores the base's stored answers again without loading it."""
    import gc
    import weakref

    _heldout(db)
    models.register_model(db, "tiny-base", str(tiny_model_dir), "base")
    models.register_model(db, "tuned", str(tuned_model_dir), "policy", base_model="tiny-base")
    real_load, alive, loads = evaluation._load_policy, [], []

    def load(db_, name):
        gc.collect()
        assert [ref() for ref in alive if ref() is not None] == [], f"{name} loaded while another model is held"
        model, tokenizer = real_load(db_, name)
        alive.append(weakref.ref(model))
        loads.append(name)
        return model, tokenizer

    monkeypatch.setattr(evaluation, "_load_policy", load)
    settings = EvalSettings(reward=WORDS, samples=2, max_new_tokens=4)
    base, tuned = evaluation.evaluate_models(db, ["tuned"], settings, with_bases=True)
    assert loads == ["tiny-base", "tuned", "tiny-base"]  # base answers; tuned alone; base again for KL only
    assert tuned.metrics["eval/kl"] == pytest.approx(sum(row["kl"] for row in tuned.samples) / 6)
    assert tuned.metrics["eval/kl"] != 0.0

    # Another measure (say a newer reward model): the base's answers are the same, scored anew; not loaded.
    loads.clear()
    other = EvalSettings(reward="eval_rewards:chars", samples=2, max_new_tokens=4)
    base2, tuned2 = evaluation.evaluate_models(db, ["tuned"], other, with_bases=True)
    assert loads == ["tuned", "tiny-base"]
    assert base2.id != base.id and [r["answer"] for r in base2.samples] == [r["answer"] for r in base.samples]
    assert [r["reward"] for r in base2.samples] == [float(len(r["answer"])) for r in base.samples]
    assert base2.metrics["eval/reward_mean"] == pytest.approx(sum(len(r["answer"]) for r in base.samples) / 6)
    assert base2.metrics["eval/length_mean"] == base.metrics["eval/length_mean"]
    assert base2.settings["reward"] == "eval_rewards:chars" and "eval/win_rate" in tuned2.metrics
