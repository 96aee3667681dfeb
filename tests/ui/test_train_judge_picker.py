"""Issue 46 item 2: the Train tab's Judge picker for an online DPO run. Its values are the `judge` settings
`rlhf-studio train online-dpo --set judge=` takes, shown in words; a picked judge is stored as the CLI stores it,
the untouched form's as it showed; people without annotator accounts are refused at launch with the fix; the
choices follow the models registry."""
from __future__ import annotations

import gradio as gr
import pytest

from labeler.services.training import jobs
from labeler.ui.context import ServeSettings, UIContext
from labeler.ui.model_choices import judge_choices
from labeler.ui.tabs.train import form

ADMIN = "root"


@pytest.fixture
def ctx(db_path, tmp_path, tiny_model_dir):
    """A database with an admin and three training prompts (online DPO trains on prompts alone)."""
    from labeler.services.data import accounts, prompts
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, ADMIN, "root-password-1", role="admin")
    prompts.add_prompts(db, [f"Judge picker prompt {k}" for k in range(3)], source="test")
    db.conn.close()
    return UIContext(ServeSettings(db_path=db_path, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs")))


@pytest.fixture
def launch_form(ctx):
    """The form as the tab builds it: each stage's values as its run would resolve them."""
    from labeler.services.training import train_configs
    from storage import open_db

    db = open_db(ctx.settings.db_path)
    shown = {stage: form.shown_settings(db, ctx.project, stage) for stage in train_configs.STAGES}
    db.conn.close()
    with gr.Blocks():
        return form.build_form(shown)


@pytest.fixture
def queued_only(monkeypatch):
    monkeypatch.setattr(jobs, "start_queued", lambda db, *a, **k: [])  # queued, not started: no worker here


def add_annotator(ctx) -> None:
    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(ctx.settings.db_path)
    accounts.create_user(db, "ann", "ann-password-1")
    db.conn.close()


def register_reward_models(ctx, *names) -> None:
    from labeler.services.serving import models
    from storage import open_db

    db = open_db(ctx.settings.db_path)
    for name in names:
        models.register_model(db, name, str(ctx.settings.model), kind="reward")
    db.conn.close()


def online_dpo_form(launch_form) -> dict:
    """The form's values as they first show, with online DPO picked (its default base model)."""
    data = {component: component.value for component in launch_form.inputs}
    data[launch_form.stage] = "online-dpo"
    data[launch_form.model] = form.show_stage("online-dpo")[0]["value"]
    return data


def stored_runs(ctx) -> list:
    from labeler.services.execution import runs
    from storage import open_db

    db = open_db(ctx.settings.db_path)
    try:
        return sorted(runs.list_runs(db), key=lambda run: run.id)
    finally:
        db.conn.close()


def test_the_judges_are_offered_in_words_as_the_settings_the_cli_takes():
    assert judge_choices([]) == [
        ("People (blind pairs in the Rank tab)", "people"),
        ("Mix (people where the reward model is least sure)", "mix"),
        ("The newest reward model (none registered yet)", "rm"),
        ("Sentiment (VADER)", "vader"), ("Sentiment of prompt + answer (VADER)", "vader-with-prompt")]
    # each registered reward model by name, newest first (list_models gives them oldest first)
    assert judge_choices(["rm-a", "rm-b"])[2:5] == [("The newest reward model (rm-b)", "rm"),
                                                     ("Reward model rm-b", "rm:rm-b"), ("Reward model rm-a", "rm:rm-a")]


def test_the_judge_row_shows_for_online_dpo_alone_and_starts_at_the_resolved_judge(launch_form):
    judge = launch_form.judge
    assert isinstance(judge, gr.Dropdown) and judge.elem_id == "train-judge" and judge.label == "Judge"
    assert judge.allow_custom_value  # a spec typed as `--set judge=` takes it (module:function refused on launch)
    assert judge.value == "rm"  # StudioOnlineDPOConfig's judge, as the run resolves it
    assert judge in launch_form.inputs
    for stage in ("online-dpo", "ppo", "dpo", "rm"):
        shown = form.show_stage(stage)
        assert shown[-1]["visible"] is (stage == "online-dpo")  # the judge row
        assert shown[1]["visible"] is (stage in ("ppo", "grpo", "rloo"))  # the reward row: not online DPO's


@pytest.mark.parametrize("judge", ["people", "mix", "rm", "rm:rm-a", "vader"])
def test_a_picked_judge_is_stored_as_train_set_judge_stores_it(ctx, launch_form, queued_only, tmp_path, judge):
    from labeler.cli import main

    add_annotator(ctx)  # people and mix need someone to rank the pairs
    register_reward_models(ctx, "rm-a")
    data = online_dpo_form(launch_form)
    data[launch_form.judge] = judge
    notice, _ = form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    assert notice.startswith("Run **#1**")
    assert main(["train", "online-dpo", "--db", ctx.settings.db_path, "--set", f"model={data[launch_form.model]}",
                 "--set", f"judge={judge}", "--runs-dir", str(tmp_path / "cli-runs")]) == 0
    web, cli = stored_runs(ctx)
    assert web.stage == "online-dpo" and web.config["trainer"]["judge"] == judge
    assert web.config == cli.config


def test_the_untouched_form_stores_the_judge_it_showed(ctx, launch_form, queued_only):
    data = online_dpo_form(launch_form)
    shown = data[launch_form.judge]
    form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    [run] = stored_runs(ctx)
    assert shown == "rm" and run.config["trainer"]["judge"] == shown
    # the settings sent: the judge as shown, the model, nothing the run resolves anyway
    from storage import open_db

    db = open_db(ctx.settings.db_path)
    assert launch_form.settings(data, db, ctx.project) == ("online-dpo", {"judge": "rm", "model": "default"})
    # a judge in "More settings" wins over the picker's, as those lines win over every widget
    data[launch_form.advanced] = "judge=vader"
    assert launch_form.settings(data, db, ctx.project)[1]["judge"] == "vader"
    # another stage sends no judge
    data[launch_form.stage], data[launch_form.advanced] = "dpo", ""
    assert "judge" not in launch_form.settings(data, db, ctx.project)[1]
    db.conn.close()


@pytest.mark.parametrize("judge", ["people", "mix"])
def test_people_as_the_judge_without_annotator_accounts_is_a_toast_naming_the_fix(ctx, launch_form, queued_only,
                                                                                  judge):
    data = online_dpo_form(launch_form)
    data[launch_form.judge] = judge
    # the Launch button's handler: "Launching" at once, then the refusal as a toast (gr.Error) and an empty notice
    streamed = form.launch_streamed(ctx, launch_form, data, gr.Request(username=ADMIN))
    assert next(streamed)[0].startswith(form.LAUNCHING)
    # the toast in the form's words: the picker's label, what to do, the value picked
    with pytest.raises(gr.Error) as toast:
        list(streamed)
    assert toast.value.message == ("Judge: there are no annotator accounts to rank the pairs; add one with "
                                   f"`rlhf-studio users add NAME` (or the Admin tab) first (got {judge})")
    assert stored_runs(ctx) == []
    add_annotator(ctx)  # the fix the toast names: the same form now launches
    notice, _ = form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    assert notice.startswith("Run **#1**") and stored_runs(ctx)[0].config["trainer"]["judge"] == judge


def test_a_typed_judge_that_names_code_is_refused_as_a_reward_that_does(ctx, launch_form, queued_only):
    data = online_dpo_form(launch_form)
    data[launch_form.judge] = "os:system"  # typed: the picker takes a custom value
    with pytest.raises(gr.Error, match="only be set from the command line"):
        form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    data[launch_form.judge] = "crowd"
    with pytest.raises(gr.Error, match="unknown reward 'crowd'"):
        form.launch_run(ctx, launch_form, data, request=gr.Request(username=ADMIN))
    assert stored_runs(ctx) == []


def test_a_reward_model_registered_after_the_page_loaded_is_offered(ctx):
    update = form.refresh_judges(ctx, request=gr.Request(username=ADMIN))
    assert [value for _, value in update["choices"]] == ["people", "mix", "rm", "vader", "vader-with-prompt"]
    register_reward_models(ctx, "rm-a", "rm-late")
    update = form.refresh_judges(ctx, request=gr.Request(username=ADMIN))
    assert update["choices"][2:5] == [("The newest reward model (rm-late)", "rm"), ("Reward model rm-late", "rm:rm-late"),
                                      ("Reward model rm-a", "rm:rm-a")]
    assert "value" not in update  # the admin's pick is kept
    add_annotator(ctx)
    assert form.load_judges(ctx, request=gr.Request(username="ann")) == gr.update()  # page load: no toast, no change
    with pytest.raises(gr.Error):
        form.refresh_judges(ctx, request=gr.Request(username="ann"))


def test_the_app_refreshes_the_judges_on_load_and_after_a_stage_is_picked(ctx):
    from labeler.ui.app import build_app

    app = build_app(ctx.settings)
    by_name = {}
    for event in app.fns.values():
        by_name.setdefault(getattr(event.fn, "__name__", None), []).append(event)
    [judge] = [block for block in app.blocks.values() if getattr(block, "elem_id", None) == "train-judge"]
    [load], [after_stage] = by_name["load_judges"], by_name["refresh_judges"]
    assert load.outputs == [judge] and after_stage.outputs == [judge]
    assert [name for _, name in load.targets] == ["load"]
    # the stage's change event: show_stage (the judge row shown), refresh_values, then the judges read again
    chain, step = [], after_stage
    while True:
        chain.append(step.fn.__name__)
        if step.trigger_after is None:
            break
        step = app.fns[step.trigger_after]
    assert chain == ["refresh_judges", "refresh_values", "show_stage"]
    [(block_id, trigger)] = step.targets
    assert trigger == "change" and app.blocks[block_id].elem_id == "train-stage"
    assert any(getattr(block, "elem_id", None) == "train-judge" for block in step.outputs) is False
