"""The Train tab's parts called as the browser's events call them: the monitor's refresh (server-drawn SVG charts,
one per metric, and the before/after table), the form's preview and launch, the page-load pickers, the
reward-model inspector. Each handler is a named function of its part, called with the app's UIContext."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest
from helpers import rank_good_over_bad

from labeler.services.settings import job_settings
from labeler.services.training import jobs, run_preview
from labeler.services.settings.training_stages.ppo import PEOPLE_RANKING_LEARNING_RATE, REWARD_MODEL_LEARNING_RATE
from labeler.ui.context import ServeSettings, UIContext
from labeler.ui.tabs import train
from labeler.ui.tabs.train import form, inspector, monitor, run_views
from labeler.ui.tabs.train.run_views import COMPARISON_COLUMNS, default_metrics

ADMIN = "root"


def test_default_plots_are_reward_kl_and_the_human_metrics_a_run_has():
    ppo = ["env/reward_mean", "objective/kl", "ppo/loss/total", "human/labels_used", "rm_online/agreement"]
    assert default_metrics("ppo", ppo) == ["env/reward_mean", "objective/kl", "human/labels_used", "rm_online/agreement"]
    assert default_metrics("grpo", ["kl", "loss", "reward"]) == ["reward", "kl"]
    assert default_metrics("rm", ["accuracy", "grad_norm", "loss"]) == ["loss", "accuracy"]
    assert default_metrics("dpo", ["loss", "rewards/margins"]) == ["rewards/margins", "loss"]
    assert default_metrics("sft", ["loss", "grad_norm"]) == ["loss"]
    assert default_metrics("sft", ["grad_norm", "lr"]) == ["grad_norm", "lr"]


@pytest.fixture
def ctx(db_path, tmp_path, tiny_model_dir):
    """The UIContext the tab's handlers get: a database with an admin."""
    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, ADMIN, "root-password-1", role="admin")
    db.conn.close()
    return UIContext(ServeSettings(db_path=db_path, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs")))


@pytest.fixture
def labels(ctx, db_path):
    """3 training prompts and the admin's ranking of each one's two answers: data a launch accepts (one with no
    data is refused: run_preview.refuse_without_data)."""
    from storage import open_db

    db = open_db(db_path)
    rank_good_over_bad(db, ADMIN, [f"Train tab prompt {k}" for k in range(3)])
    db.conn.close()


@pytest.fixture
def launch_form(ctx):
    """The form's widgets as they first show (built in a Blocks, as the tab builds them: each stage's values as its
    run would resolve them in the project)."""
    from labeler.services.training import train_configs
    from storage import open_db

    db = open_db(ctx.settings.db_path)
    shown = {stage: form.shown_settings(db, ctx.project, stage) for stage in train_configs.STAGES}
    db.conn.close()
    with gr.Blocks():
        return form.build_form(shown)


def pick(ctx, launch_form, data: dict, component, value) -> None:
    """Set a widget as a person does in the browser: picking a stage or a reward refreshes the values the form
    shows (form.refresh_values, the events' second step)."""
    data[component] = value
    if component in (launch_form.stage, launch_form.job_widgets["reward"]):
        updates = form.refresh_values(ctx, launch_form, data[launch_form.stage], data[launch_form.job_widgets["reward"]],
                                      data[launch_form.model], data[launch_form.advanced],
                                      request=gr.Request(username=ADMIN))
        for widget, update in zip(launch_form.refreshed_outputs, updates):
            if isinstance(update, dict) and "value" in update:
                data[widget] = update["value"]


def register_reward_models(ctx, *names) -> None:
    from labeler.services.serving import models
    from storage import open_db

    db = open_db(ctx.settings.db_path)
    for name in names:
        models.register_model(db, name, str(ctx.settings.model), kind="reward")
    db.conn.close()


def _refresh(ctx, *args):
    return monitor.refresh(ctx, *args, request=gr.Request(username=ADMIN))


def test_refresh_shows_the_before_after_table_and_the_reward_curve(ctx, db_path):
    from storage import open_db

    db = open_db(db_path)
    run_id = db.execute("INSERT INTO runs (project_id, stage, status, started_at, ended_at, step, total_steps)"
                        " VALUES (1, 'ppo', 'succeeded', '2025-01-01T10:00:00.000000Z', '2025-01-01T10:05:00.000000Z',"
                        " 2, 2)").lastrowid
    for step, value, at in [(1, 0.1, "2025-01-01T10:01:00.000Z"), (2, 0.4, "2025-01-01T10:02:00.000Z")]:
        db.execute("INSERT INTO metrics (run_id, step, name, value, created_at) VALUES (?, ?, 'env/reward_mean', ?, ?)",
                   [run_id, step, value, at])
    settings = json.dumps({"prompts": "heldout", "prompts_n": 1, "prompts_hash": "x", "reward": "vader", "samples": 1,
                           "max_new_tokens": 4, "threshold": 0.5, "seed": 0, "bf16": False}, sort_keys=True)
    for model, base, run, reward, answer in [("default", "default", None, 0.2, "meh"),
                                              ("ppo-run1", "default", run_id, 0.9, "great")]:
        metrics = {"eval/reward_mean": reward, "eval/positive_share": float(reward > 0.5), "eval/kl": 0.0 if run is None
                   else 3.0, "eval/length_mean": 4.0, "eval/distinct_2": 1.0, "eval/truncated_share": 1.0}
        if run is not None:  # against its base: won its one comparison
            metrics.update({"eval/win_rate": 1.0, "eval/win_low": 0.21, "eval/win_high": 1.0})
        db.execute("INSERT INTO evaluations (project_id, model, kl_base, run_id, settings_json, metrics_json, samples_json)"
                   " VALUES (1, ?, ?, ?, ?, ?, ?)", [model, base, run, settings, json.dumps(metrics),
                                                     json.dumps([{"prompt": "The film", "answer": answer, "reward": reward,
                                                                  "kl": 0.0, "length": 4}])])
    db.conn.close()
    out = _refresh(ctx, run_id, [])
    plot, curve, table, answers, note = out[4], out[9], out[10], out[11], out[12]
    # One chart, the reward, with its two steps; then the held-out win rate against the base: the base against
    # itself 50%, the model 100% (half the height).
    assert re.findall(r'data-series="([^"]+)"[^>]* points="([^"]+)"', plot) == [("env/reward_mean", "56.0,200.0 548.0,40.0")]
    assert "Reward (mean per answer)" in plot and "Win rate against the base on held-out prompts" in plot
    assert re.findall(r'class="studio-chart-bar" data-label="([^"]+)"[^>]* height="([^"]+)"', plot) == [
        ("base (itself)", "80.0"), ("after", "160.0")]
    # Without a win rate (an evaluation stored before it existed): the positive share before and after.
    db = open_db(db_path)
    db.execute("UPDATE evaluations SET metrics_json = json_remove(metrics_json, '$.\"eval/win_rate\"')")
    assert run_views.heldout_bars(db, run_id) == ("Positive share on held-out prompts",
                                                  [("before (base)", 0.0), ("after", 1.0)])
    db.conn.close()
    # The curve: minutes 1 and 2 (x ticks 1.0..2.0), rewards 0.1 and 0.4 (y ticks 0.1..0.4).
    assert re.findall(r'points="([^"]+)"', curve) == ["56.0,200.0 548.0,40.0"]
    assert list(table.columns) == COMPARISON_COLUMNS
    # mean score, positive share, win rate vs base, KL, length, cut at the limit, distinct-2
    assert table.astype(object).where(table.notna(), None).values.tolist() == [
        ["before (base)", "default", 0.2, 0.0, None, 0.0, 4.0, 1.0, 1.0, None],
        ["after", "ppo-run1", 0.9, 1.0, 1.0, 3.0, 4.0, 1.0, 1.0, "21% to 100%"]]
    assert answers.values.tolist() == [["The film", "meh", "great"]]
    assert "1 held-out prompts x 1 answers" in note and "`default`" in note and "vader (sentiment)" in note
    # the verdict in words first: one prompt cannot decide
    assert note.startswith("**The tuned model is not yet distinguishable from its base (it won 100% of the "
                           "comparisons, 95% interval 21% to 100%")
    assert "95% interval 21% to 100%" in note and "100% of the answers were cut at the answer length (4 tokens)" in note


def test_refresh_without_metrics_or_evaluation_sends_no_plot_data(ctx, db_path):
    from storage import open_db

    db = open_db(db_path)
    run_id = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (1, 'rm', 'succeeded')").lastrowid
    db.conn.close()
    out = _refresh(ctx, run_id, [])
    assert "No metrics yet" in out[4] and "<polyline" not in out[4] and "No rewards yet" in out[9]
    assert len(out[10]) == 0 and "No held-out evaluation" in out[12]
    # A policy run on a project without held-out prompts says so on its page, not only in its log.
    db = open_db(db_path)
    ppo = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (1, 'ppo', 'succeeded')").lastrowid
    db.conn.close()
    assert "⚠ No held-out evaluation: project 'default' has no held-out prompts" in _refresh(ctx, ppo, [])[12]


def test_refresh_changes_nothing_for_a_caller_who_is_not_an_admin(ctx):
    out = monitor.refresh(ctx, None, [], request=gr.Request(username="nobody"))  # every 2 s: no toast
    assert out == tuple(gr.update() for _ in monitor.REFRESHED)
    assert _refresh(ctx, None, [])[1].startswith("No run selected")


def test_preview_says_what_a_run_would_use_before_launch(ctx, launch_form):
    data = {component: component.value for component in launch_form.inputs}  # the form as it first shows
    out = form.preview_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    assert out.startswith("**This rm run will use** 0 ")  # no labels yet: the preview says so before a launch
    assert "`default`" in out  # a reward model starts from the embedded chat model unless the form names another
    with pytest.raises(gr.Error):
        form.preview_run(ctx, launch_form, data, request=gr.Request(username="nobody"))  # admins only, as launching


def test_a_run_the_preview_knows_has_no_data_is_refused_at_launch(ctx, labels, launch_form, db_path, monkeypatch):
    """Issue 37 item 8: SFT with annotators=nobody was queued, took the worker slot and failed minutes later with
    "only 0 well-rated answers"; the launch now refuses it with the preview's reason, and nothing is queued."""
    from storage import open_db

    monkeypatch.setattr(jobs, "start_queued", lambda db, *a, **k: [])  # queued, not started: no worker here
    by_id = {component.elem_id: component for component in launch_form.inputs}
    data = {component: component.value for component in launch_form.inputs}
    data[by_id["train-stage"]], data[by_id["train-model"]] = "sft", "default"
    data[launch_form.job_widgets["annotators"]] = "nobody"
    preview = form.preview_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    assert "only 0 answers with these filters: the run would stop at once" in preview
    with pytest.raises(gr.Error, match="not launched: only 0 answers with these filters: the run would stop at once"):
        form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    # The same form with the annotator who labelled: 3 rankings, no ratings, so SFT still has no answer to imitate;
    # a reward model has its 3 pairs and is queued.
    data[launch_form.job_widgets["annotators"]] = ADMIN
    with pytest.raises(gr.Error, match="only 0 answers"):
        form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    data[by_id["train-stage"]], data[by_id["train-model"]] = "rm", "default-encoder"
    notice, _ = form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    assert notice.startswith("Run **#1**")
    db = open_db(db_path)
    assert [row["stage"] for row in db.execute("SELECT stage FROM runs")] == ["rm"]
    db.conn.close()


def test_choices_load_is_quiet_for_an_annotator_and_fills_the_pickers_for_an_admin(ctx, db_path):
    from labeler.services.data import accounts
    from labeler.ui.app import build_app
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, "ann", "ann-password-1")
    db.conn.close()
    # The page-load event as the app registers it (quiet_on_load around the named handler).
    [event] = [fn for fn in build_app(ctx.settings).fns.values() if fn.api_name == "train_choices"]
    load = event.fn
    assert load(request=gr.Request(username="ann")) == tuple(gr.update() for _ in range(4))  # no toast, no change
    model, reward, inspect_model, run = train.load_choices(ctx, request=gr.Request(username=ADMIN))
    assert "default" in model["choices"] and model["choices"][-1] == "default-encoder"
    assert [value for _, value in reward["choices"]] == ["vader", "vader-with-prompt", "human", "rm", "mix"]
    assert inspect_model["choices"] == [] and inspect_model["value"] is None
    assert run["choices"] == [] and run["value"] is None
    # Reward models registered since: the Reward picker names each (newest first), alone and with people.
    from labeler.services.serving import models

    db = open_db(db_path)
    for name in ("rm-run1", "rm-run3"):
        models.register_model(db, name, str(ctx.settings.model), kind="reward")
    db.conn.close()
    _, reward, inspect_model, _ = train.load_choices(ctx, request=gr.Request(username=ADMIN))
    assert reward["choices"] == [("Sentiment (VADER)", "vader"),
                                 ("Sentiment of prompt + answer (VADER)", "vader-with-prompt"),
                                 ("People rate the answers", "human"), ("Newest reward model (rm-run3)", "rm"),
                                 ("Reward model rm-run3", "rm:rm-run3"), ("Reward model rm-run1", "rm:rm-run1"),
                                 ("People + newest reward model (rm-run3)", "mix"),
                                 ("People + reward model rm-run3", "mix:rm-run3"),
                                 ("People + reward model rm-run1", "mix:rm-run1")]
    assert "value" not in reward  # a refresh keeps what the admin picked
    assert inspect_model["choices"] == ["rm-run1", "rm-run3"] and inspect_model["value"] == "rm-run3"


def test_reward_agreement_needs_a_reward_model(ctx):
    with pytest.raises(gr.Error, match="pick a reward model"):
        inspector.agreement_and_scores(ctx, "", request=gr.Request(username=ADMIN))
    with pytest.raises(gr.Error, match="pick a reward model"):
        inspector.score_answers(ctx, None, "p", "a\nb", request=gr.Request(username=ADMIN))
    with pytest.raises(gr.Error):
        inspector.agreement_and_scores(ctx, "some-rm", request=gr.Request(username="nobody"))  # admins only


def test_run_actions_need_a_picked_run(ctx):
    with pytest.raises(gr.Error, match="pick a run first"):
        monitor.run_action(ctx, jobs.cancel_run, "cancelled", None, request=gr.Request(username=ADMIN))


def test_the_reward_is_one_spec_picker_sent_only_for_policy_stages(ctx, labels, launch_form, monkeypatch):
    launched = []

    def create_run(db, stage, settings, **kwargs):
        launched.append((stage, settings))
        return SimpleNamespace(id=len(launched), status="queued")

    monkeypatch.setattr(jobs, "create_run", create_run)  # the settings the form sends, no worker started
    data = {component: component.value for component in launch_form.inputs}  # the form as it first shows
    by_id = {component.elem_id: component for component in launch_form.inputs}  # the ids the browser tests use

    def launch(data, request):
        return form.launch_run(ctx, launch_form, data, request)

    reward = by_id["train-reward"]
    # One picker whose values are reward specs; no widget of its own for what a spec says.
    assert isinstance(reward, gr.Dropdown) and reward.value == "rm" and reward.label == "Reward"
    assert [value for _, value in reward.choices] == ["vader", "vader-with-prompt", "human", "rm", "mix"]
    assert not {"train-reward-model", "train-reward-function"} & set(by_id)
    assert not set(form.SPELLED_BY_REWARD) & set(launch_form.job_widgets)
    register_reward_models(ctx, "rm-run2")
    pick(ctx, launch_form, data, by_id["train-stage"], "ppo")
    pick(ctx, launch_form, data, reward, "vader")
    launch(data, request=gr.Request(username=ADMIN))
    pick(ctx, launch_form, data, reward, "mix:rm-run2")
    launch(data, request=gr.Request(username=ADMIN))
    pick(ctx, launch_form, data, reward, "rm")  # the default, sent as picked (a typed value is kept)
    launch(data, request=gr.Request(username=ADMIN))
    # A reward-model run ignores the hidden reward row (reward=human would refuse num_processes > 1).
    pick(ctx, launch_form, data, reward, "human")
    pick(ctx, launch_form, data, by_id["train-stage"], "rm")
    launch(data, request=gr.Request(username=ADMIN))
    # The reward as `--set reward=SPEC`, the base model picker's value, and nothing the run resolves to anyway: the
    # form showed the values the run resolves (the learning rate for each reward, the steps for each stage).
    assert launched == [("ppo", {"reward": "vader", "model": "default"}),
                        ("ppo", {"reward": "mix:rm-run2", "model": "default"}),
                        ("ppo", {"reward": "rm", "model": "default"}),
                        ("rm", {"model": "default"})]


@pytest.mark.parametrize("spec, job", [
    # a typed value is stored even when it is the default (vader is reward_function's, rm reward's)
    ("vader", {"reward": "function", "reward_function": "vader"}),
    ("vader-with-prompt", {"reward": "function", "reward_function": "vader-with-prompt"}),
    ("human", {"reward": "human"}),
    ("rm", {"reward": "rm"}),  # the default source, the newest reward model
    ("rm:rm-run3", {"reward": "rm", "reward_model": "rm-run3"}),
    ("mix", {"reward": "mix", "reward_model": "rm-run3"}),  # a mix run starts from the newest reward model
    ("mix:rm-run3", {"reward": "mix", "reward_model": "rm-run3"}),
])
def test_a_run_queued_from_the_form_stores_what_train_set_reward_stores(ctx, labels, launch_form, db_path, tmp_path,
                                                                       monkeypatch, spec, job):
    from labeler.cli import main
    from labeler.services.execution import runs
    from storage import open_db

    monkeypatch.setattr(jobs, "start_queued", lambda db, *a, **k: [])  # queued, not started: no worker here
    register_reward_models(ctx, "rm-run3")
    by_id = {component.elem_id: component for component in launch_form.inputs}
    data = {component: component.value for component in launch_form.inputs}
    data[by_id["train-model"]] = "default"
    pick(ctx, launch_form, data, by_id["train-stage"], "ppo")
    pick(ctx, launch_form, data, by_id["train-reward"], spec)
    notice, _ = form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    assert notice.startswith("Run **#1**")
    assert main(["train", "ppo", "--db", db_path, "--set", "model=default", "--set", f"reward={spec}",
                 "--runs-dir", str(tmp_path / "cli-runs")]) == 0
    db = open_db(db_path)
    web, cli = sorted(runs.list_runs(db), key=lambda run: run.id)
    db.conn.close()
    assert web.config == cli.config
    stored = {key: value for key, value in web.config["job"].items() if key.startswith("reward")}
    # The form sends no trainer setting: the trainer part is PPO's app defaults alone (stored since issue 35), and a
    # run rewarded by people's rankings or by a reward model alone gets the app's learning rate for that reward
    # (a mix run that starts from a reward model: the reward model's).
    app_defaults = {"horizon": 64, "kl_coef_min": 0.03}
    if job.get("reward") in ("human", "mix") and "reward_model" not in job:
        app_defaults["learning_rate"] = PEOPLE_RANKING_LEARNING_RATE
    elif job.get("reward", "rm") in ("rm", "mix"):
        app_defaults["learning_rate"] = REWARD_MODEL_LEARNING_RATE
    assert stored == job and web.config["trainer"] == app_defaults


def test_the_form_may_not_name_code_to_import_as_the_reward(ctx, launch_form, db_path):
    from storage import open_db

    by_id = {component.elem_id: component for component in launch_form.inputs}
    data = {component: component.value for component in launch_form.inputs}
    data[by_id["train-stage"]], data[by_id["train-reward"]] = "ppo", "os:system"  # typed: the picker takes a spec
    with pytest.raises(gr.Error, match="only be set from the command line"):
        form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    data[by_id["train-reward"]] = "crowd"
    with pytest.raises(gr.Error, match="unknown reward 'crowd'"):
        form.preview_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    db = open_db(db_path)
    assert db["runs"].count == 0
    db.conn.close()


def test_the_form_groups_are_the_job_sections_and_a_section_is_sent_for_its_stages(ctx, launch_form):
    # Every section's settings the web may set have a widget, grouped by section; code and files do not.
    assert list(launch_form.section_groups) == ["Run", "Data", "Rewards", "Launch"]
    assert {"lora_r", "seed", "sft_min_score", "rm_score_std", "heldout_every", "num_processes"} <= set(launch_form.job_widgets)
    assert not {"model", "runner", "accelerate_config"} & set(launch_form.job_widgets)  # model: its own picker
    # Picking a stage shows the reward row and the sections it reads: outputs model, reward row, 4 sections, ...
    for stage, rewards in (("ppo", True), ("grpo", True), ("rm", False), ("kto", False)):
        shown = form.show_stage(stage)
        assert shown[1]["visible"] is rewards and [g["visible"] for g in shown[2:6]] == [True, True, rewards, True]
    data = {component: component.value for component in launch_form.inputs}
    widgets = launch_form.job_widgets
    data[widgets["lora_r"]], data[widgets["rm_score_std"]], data[widgets["test_size"]] = 4, 1.0, 0.2
    from storage import open_db

    db = open_db(ctx.settings.db_path)
    # what differs from what the run resolves to, the reward as picked (the form shows the resolved values)
    for stage, sent in (("rm", {"lora_r": 4, "test_size": 0.2}),
                        ("ppo", {"lora_r": 4, "test_size": 0.2, "rm_score_std": 1.0, "reward": "rm"})):
        data[launch_form.stage] = stage
        assert launch_form.settings(data, db, ctx.project) == (stage, {**sent, "model": "default"})
    db.conn.close()


def test_every_form_label_is_in_plain_words(launch_form):
    # What the browser test checks on a rendered page (tests/e2e/test_train_form_browser.py), for every widget.
    raw_name = re.compile(r"\b[a-z]+_[a-z0-9_]+\b")  # a config field's name, e.g. per_device_train_batch_size
    labels = [component.label for component in launch_form.inputs if component.label]
    assert "Answers per prompt" in labels and "LoRA rank" in labels and "Reward" in labels
    assert [label for label in labels if raw_name.search(label)] == []


def test_switching_runs_shows_the_new_run_s_own_plots_and_reward_curve(ctx, db_path):
    """Issue 37 item 5: after an SFT run, a GRPO run picked showed only "Training loss" (the SFT run's plot was
    the timer's input), never filled "Mean reward by wall time" (GRPO logs `reward`, not env/reward_mean), and
    reported "4 / 4" for 2 steps asked (its trainer counts optimizer steps)."""
    from storage import open_db

    db = open_db(db_path)
    sft = db.execute("INSERT INTO runs (project_id, stage, status, step, total_steps) VALUES (1, 'sft', 'succeeded',"
                     " 2, 2)").lastrowid
    grpo = db.execute("INSERT INTO runs (project_id, stage, status, started_at, step, total_steps, config_json)"
                      " VALUES (1, 'grpo', 'succeeded', '2025-01-01T10:00:00.000000Z', 4, 4, ?)",
                      [json.dumps({"job": {"steps": 2}, "trainer": {}})]).lastrowid
    db.execute("INSERT INTO metrics (run_id, step, name, value) VALUES (?, 1, 'loss', 0.5)", [sft])
    for step, minute in [(1, 1), (2, 2)]:
        for name, value in [("loss", 0.3), ("reward", 0.1 * step), ("kl", 0.01)]:
            db.execute("INSERT INTO metrics (run_id, step, name, value, created_at) VALUES (?, ?, ?, ?, ?)",
                       [grpo, step, name, value, f"2025-01-01T10:0{minute}:00.000Z"])
    db.conn.close()
    shown_sft = _refresh(ctx, sft, None)
    assert shown_sft[3]["value"] == ["loss"]
    # The GRPO run picked while the SFT run's plots were shown: the GRPO run's default plots.
    after_pick = _refresh(ctx, grpo, {"run": sft, "metrics": ["loss"]})
    assert after_pick[3]["value"] == ["reward", "kl"]
    assert re.findall(r'data-series="([^"]+)"', after_pick[4]) == ["reward", "kl"]
    assert re.findall(r'points="([^"]+)"', after_pick[9]) == ["56.0,200.0 548.0,40.0"]  # the reward by wall time
    assert "step 4 / 4 (optimizer steps: the 2 steps asked are generation batches)" in after_pick[2]
    # Metrics picked for the GRPO run stay for it (and only for it).
    picked = monitor.pick_metrics(ctx, grpo, ["loss"], request=gr.Request(username=ADMIN))
    assert picked[-1] == {"run": grpo, "metrics": ["loss"]} and picked[3]["value"] == ["loss"]
    assert _refresh(ctx, grpo, picked[-1])[3]["value"] == ["loss"]
    assert _refresh(ctx, sft, picked[-1])[3]["value"] == ["loss"]  # the SFT run's own default


def test_the_monitor_s_events_take_the_picker_values_as_sent(app_db_for_monitor):
    """The timer's input is the run and the remembered pick, not the checkboxes; none is checked against the
    session's copy of a picker's choices (Gradio logged "Value: 'reward' ... not in the list of choices: []")."""
    by_name = {fn.api_name: fn for fn in app_db_for_monitor.fns.values()}
    for api_name in ("train_refresh", "train_select", "train_metrics"):
        assert by_name[api_name].preprocess is False, api_name
    assert [type(block).__name__ for block in by_name["train_refresh"].inputs] == ["Dropdown", "State"]


@pytest.fixture
def app_db_for_monitor(ctx, db_path, tiny_model_dir, tmp_path):
    from labeler.ui.app import build_app

    return build_app(ServeSettings(db_path=db_path, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs")))


def test_launch_says_so_at_once_and_then_the_run(ctx, labels, launch_form, db_path, monkeypatch):
    """Issue 37 item 9: the Launch button said nothing for 35-122 s on a loaded machine (the first launch imports
    the trainers' code). Its first answer is now "Launching", before any work; seconds so far while it runs."""
    import threading

    from labeler.ui.tabs.train import waiting

    monkeypatch.setattr(jobs, "start_queued", lambda db, *a, **k: [])
    monkeypatch.setattr(waiting, "WAIT_TICK_S", 0.05)
    release = threading.Event()
    real = form.launch_run

    def slow_launch(*args):
        release.wait(5)  # the work starts only once the first answer is out
        return real(*args)

    monkeypatch.setattr(form, "launch_run", slow_launch)
    data = {component: component.value for component in launch_form.inputs}  # rm on the 3 pairs of `labels`
    answers = form.launch_streamed(ctx, launch_form, data, gr.Request(username=ADMIN))
    first = next(answers)
    assert first[0].startswith("⏳ Launching") and first[1] == gr.skip()
    waited = next(answers)
    assert re.fullmatch(r"⏳ Launching: .* \(\d+ s so far\)", waited[0])
    release.set()
    *_, last = answers
    assert last[0].startswith("Run **#1**") and last[1]["value"] == 1
    # A refused launch: the notice is emptied and the refusal raised (its toast).
    data[launch_form.job_widgets["annotators"]] = "nobody"
    refused = form.launch_streamed(ctx, launch_form, data, gr.Request(username=ADMIN))
    assert next(refused)[0].startswith("⏳ Launching")
    rest = []
    with pytest.raises(gr.Error, match="not launched: only 0 pairs"):
        for answer in refused:
            rest.append(answer)
    assert rest[-1] == ("", gr.skip())


def test_preview_shows_the_data_first_and_the_time_estimate_with_its_progress(ctx, labels, launch_form, monkeypatch):
    from labeler.services.training import run_preview
    from labeler.ui.tabs.train import waiting

    monkeypatch.setattr(waiting, "WAIT_TICK_S", 0.05)
    asked = []

    def fake_preview(db, project, stage, settings, estimate_time=True):
        asked.append(estimate_time)
        if estimate_time:
            import time
            time.sleep(0.3)
        return SimpleNamespace(markdown=lambda: f"{stage} preview, estimate={estimate_time}")

    monkeypatch.setattr(run_preview, "preview_run", fake_preview)
    by_id = {component.elem_id: component for component in launch_form.inputs}
    data = {component: component.value for component in launch_form.inputs}
    data[by_id["train-stage"]] = "grpo"
    shown = list(form.preview_streamed(ctx, launch_form, data, gr.Request(username=ADMIN)))
    assert shown[0].startswith("⏳ Reading")
    assert shown[-1] == "grpo preview, estimate=True" and asked == [False, True]
    measuring = [text for text in shown if "Measuring a training micro-step" in text]
    assert measuring[0].startswith("grpo preview, estimate=False  \n⏳ Measuring")
    assert any(re.search(r"\(\d+ s so far\)$", text) for text in measuring)
    # DPO and the reward model are measured too (a batch of their own pairs); SFT has no time estimate: the data
    # part is the answer.
    for stage, estimated in (("dpo", True), ("rm", True), ("sft", False)):
        data[by_id["train-stage"]] = stage
        assert list(form.preview_streamed(ctx, launch_form, data, gr.Request(username=ADMIN)))[-1] == (
            f"{stage} preview, estimate={estimated}")


def test_the_launch_and_preview_events_stream(app_db_for_monitor):
    import inspect

    by_name = {fn.api_name: fn for fn in app_db_for_monitor.fns.values()}
    for api_name in ("train_launch", "train_preview"):
        assert inspect.isgeneratorfunction(by_name[api_name].fn), api_name


def test_the_command_and_output_folder_are_in_a_fold_below_the_status(ctx, db_path):
    """Issue 36 item 11: the launcher's command line and the output folder were the monitor's first lines."""
    from storage import open_db

    db = open_db(db_path)
    run_id = db.execute("INSERT INTO runs (project_id, stage, status, command, output_dir, error) VALUES (1, 'rm',"
                        " 'failed', '/usr/bin/python3 -m labeler.worker --run-id 1', '/srv/runs/run-1',"
                        " 'Traceback ...\nValueError: a <bad> value')").lastrowid
    db.conn.close()
    status = _refresh(ctx, run_id, None)[1]
    head, fold = status.split("<details", 1)
    assert head.startswith(f"### Run #{run_id} · rm · **failed**") and "ValueError: a &lt;bad&gt; value" in head
    assert "labeler.worker" not in head and "/srv/runs" not in head
    assert "<summary>Command and output folder</summary>" in fold
    assert "<code>python3 -m labeler.worker --run-id 1</code>" in fold and "<code>/srv/runs/run-1</code>" in fold


def test_the_streamed_handlers_refuse_an_annotator_before_their_first_answer(ctx, launch_form):
    data = {component: component.value for component in launch_form.inputs}
    for handler in (form.launch_streamed, form.preview_streamed):
        with pytest.raises(gr.Error, match="Not allowed"):
            next(handler(ctx, launch_form, data, gr.Request(username="nobody")))


@pytest.mark.parametrize("stage", ["sft", "rm", "dpo", "ppo", "grpo", "rloo", "kto"])
def test_a_launch_from_the_untouched_form_stores_what_the_form_showed(ctx, labels, launch_form, monkeypatch, stage):
    from labeler.services.training import run_settings
    from labeler.services.execution import runs
    from storage import open_db

    monkeypatch.setattr(jobs, "start_queued", lambda db, *a, **k: [])  # queued, not started: no worker here
    monkeypatch.setattr(run_preview, "refuse_without_data", lambda *a, **k: None)  # sft/kto: no ratings here
    data = {component: component.value for component in launch_form.inputs}
    pick(ctx, launch_form, data, launch_form.stage, stage)
    form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    db = open_db(ctx.settings.db_path)
    run = runs.list_runs(db)[0]
    db.conn.close()
    used = run_settings.ResolvedRun(stage, ctx.project, run.config).values()  # what the run trains with
    shown = {spec.name: data[launch_form.job_widgets[spec.name]] for spec in launch_form.specs_by_stage["job"]
             if stage in job_settings.section_of(spec.name).STAGES}
    shown.update({spec.name: data[widget] for spec, widget in zip(launch_form.specs_by_stage[stage],
                                                                   launch_form.stage_widgets[stage])})
    differ = {name: (value, used[name]) for name, value in shown.items() if not form._same(value, used[name])
              and name != "reward"}  # the picker shows a spec ("rm"); the run stores what it spells
    assert differ == {}
    if stage == "ppo":  # the app's rate for a reward model, shown and stored as the app's (not typed)
        assert shown["learning_rate"] == used["learning_rate"] == 2e-5 and "learning_rate" in run.config["trainer"]


def test_a_value_typed_at_the_class_default_is_kept(ctx, labels, launch_form, monkeypatch):
    from labeler.services.execution import runs
    from storage import open_db

    monkeypatch.setattr(jobs, "start_queued", lambda db, *a, **k: [])
    data = {component: component.value for component in launch_form.inputs}
    pick(ctx, launch_form, data, launch_form.stage, "ppo")
    learning_rate = launch_form.stage_widgets["ppo"][[s.name for s in launch_form.specs_by_stage["ppo"]].index(
        "learning_rate")]
    assert data[learning_rate] == 2e-5  # shown: the app's rate for a reward model
    data[learning_rate] = 6e-5  # PPOConfig's own default, typed: the app's rate must not overrule it
    form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    db = open_db(ctx.settings.db_path)
    assert runs.list_runs(db)[0].config["trainer"]["learning_rate"] == 6e-5
    db.conn.close()
