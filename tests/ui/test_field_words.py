"""Issue 49 item 7: a refusal's toast names the field as the person reads it on the form ("Measure", "Corrected
value"), not as the code does ("field 'measure'", "field 'order'"); the Train monitor offers only the buttons a run
takes (Cancel stayed red and active on finished runs)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import gradio as gr
import pytest
from test_tabs import ADMIN, app, app_db, as_user, ctx  # noqa: F401 - fixtures

from labeler.errors import InputError
from labeler.ui.field_labels import FIELD_LABELS, field_label, toast_text
from labeler.ui.soft_errors import keep_on_error, ui_errors

ROOT = Path(__file__).resolve().parents[2]


def refused_fields() -> set[str]:
    """Every field named by a literal `field="..."` in a call of the app (an InputError, or a check that raises
    one: label_kinds.validate_order(..., field="order")), in the services, the UI and the forms."""
    found = set()
    for path in [*(ROOT / "labeler").rglob("*.py")]:
        if "commands" in path.parts or path.name == "cli.py":
            continue  # the CLI's own flags: it prints the flag as typed
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "field" and isinstance(keyword.value, ast.Constant) \
                            and isinstance(keyword.value.value, str):
                        found.add(keyword.value.value)
    return found


def test_a_toast_names_the_field_in_the_forms_words():
    assert toast_text(InputError("no reward model named 'x'", field="measure")) == "Measure: no reward model named 'x'"
    assert toast_text(InputError("a ranking takes an order", field="order")).startswith("Ranking: ")
    assert toast_text(InputError("must be a share in [0, 1)", field="heldout_share")).startswith("Held-out share: ")
    # A config's own check ("name=value: why") says the value and why, once, in words.
    assert toast_text(InputError("max_new_tokens=5000: must be between 1 and 2,048", field="max_new_tokens")) == (
        "Answer length (new tokens): must be between 1 and 2,048 (got 5000)")
    # A form whose widgets read otherwise passes its own words (Data > Generate: "Prompts per batch").
    assert toast_text(InputError("batch_size=0: must be at least 1", field="batch_size"),
                      {"batch_size": "Prompts per batch"}) == "Prompts per batch: must be at least 1 (got 0)"
    # File and line stay as they are; a field with no words of its own reads as its name in words.
    assert toast_text(InputError("is empty", file="p.csv", line=3, field="prompt")) == "p.csv, line 3, Prompt: is empty"
    assert toast_text(InputError("bad", field="warmup_steps")) == "Warmup steps: bad"
    assert toast_text(InputError("no field")) == "no field"


def test_every_field_the_app_refuses_reads_in_words():
    fields = refused_fields()
    assert {"measure", "order", "heldout_share", "item_id"} <= fields  # the scan finds them
    raw = [(field, field_label(field)) for field in sorted(fields) if "_" in field_label(field)]
    assert raw == []
    for field in fields:
        assert "field '" not in toast_text(InputError("x", field=field))


def test_the_words_are_the_labels_on_screen(app):
    """Each form's word for a field starts a widget's label in the app (or a Train form setting's)."""
    from labeler.ui.tabs.train.form import PLAIN_LABELS

    shown = {str(block.label) for block in app.blocks.values() if getattr(block, "label", None)}
    shown |= set(PLAIN_LABELS.values())
    for field in ("measure", "heldout_share", "likert_max", "likert_min", "overlap", "answer_tokens", "value",
                  "item_id", "label id", "record id", "prompt number", "n_per_prompt", "which prompts", "username"):
        assert any(label.startswith(field_label(field)) for label in shown), (field, field_label(field))


def test_the_wrappers_show_the_words(recwarn):
    @ui_errors
    def red(request=None):
        raise InputError("unknown measure", field="measure")

    @ui_errors(labels={"measure": "How runs are judged"})
    def own(request=None):
        raise InputError("unknown measure", field="measure")

    @keep_on_error(1)
    def yellow(request=None):
        raise InputError("must be at least 1", field="overlap")

    with pytest.raises(gr.Error) as error:
        red()
    assert error.value.message == "Measure: unknown measure"
    with pytest.raises(gr.Error) as error:
        own()
    assert error.value.message == "How runs are judged: unknown measure"
    with pytest.warns(UserWarning, match="^Annotators per item: must be at least 1$"):
        assert yellow() == gr.skip()


def test_run_buttons_follow_the_runs_status():
    from types import SimpleNamespace

    from labeler.ui.tabs.train.monitor import run_buttons

    def status(name):
        return run_buttons(SimpleNamespace(status=name))

    # (Early stop, Cancel, Resume): jobs.request_stop, cancel_run and resume_run refuse the others.
    assert status("queued") == status("running") == (True, True, False)
    assert status("succeeded") == (False, False, False)
    assert status("failed") == status("cancelled") == (False, False, True)
    assert run_buttons(None) == (False, False, False)


def test_a_finished_runs_page_shows_no_cancel(ctx, db_path, monkeypatch):
    from labeler.services.training import jobs
    from labeler.ui.tabs.train import monitor
    from storage import open_db

    monkeypatch.setattr(jobs, "poll", lambda db: None)  # the queued run stays queued: no worker here
    monkeypatch.setattr(jobs, "start_queued", lambda db, *a, **k: [])
    db = open_db(db_path)
    done = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (1, 'rm', 'succeeded')").lastrowid
    live = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (1, 'rm', 'queued')").lastrowid
    db.conn.close()
    names = list(monitor.REFRESHED)

    def buttons(run_id):
        out = monitor.refresh(ctx, run_id, None, request=as_user(ADMIN))
        return tuple(out[names.index(name)]["visible"] for name in ("stop", "cancel", "resume"))

    assert buttons(done) == (False, False, False)
    assert buttons(live) == (True, True, False)
    assert buttons(None) == (True, True, False)  # none picked: the newest, which the page shows
    # With none picked, Cancel acts on that newest run, as the page shows it.
    assert monitor.run_action(ctx, jobs.cancel_run, "cancelled", None, request=as_user(ADMIN)) == (
        f"Run **#{live}** cancelled: cancelled.")


def test_a_correction_names_the_box_it_was_typed_in(app_db, ctx):
    """Records > Correct: the service refuses the value as a score ("field 'score'"); the toast names the box the
    admin typed it in."""
    from labeler.ui.tabs import rate
    from labeler.ui.tabs.records import corrections
    from test_tabs import ANNOTATOR

    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    rate.submit(ctx, 6, "", shown[6], request=as_user(ANNOTATOR))
    with pytest.warns(UserWarning, match=r"^Corrected value: must be (between|in|an integer)|^Corrected value: "):
        corrections.correct(ctx, "rating", 1, "99", "typo", 1, request=as_user(ADMIN))


def test_field_labels_cover_the_train_form():
    from labeler.ui.tabs.train.form import PLAIN_LABELS

    assert all(FIELD_LABELS[name] == words for name, words in PLAIN_LABELS.items())


def test_the_metric_list_reads_in_words():
    """'All metrics' listed 40 raw names (ppo/policy/clipfrac); each reads in words, its name kept as the value."""
    from labeler.ui.tabs.train.run_views import metric_words

    logged = ["env/reward_mean", "objective/kl", "ppo/policy/clipfrac", "ppo/loss/value", "ppo/val/var",
              "time/ppo/forward_pass", "val/ref_contain_eos_token", "tokens/responses_len_mean", "eval/distinct_2",
              "objective/rlhf_reward", "frac_reward_zero_std", "logps/chosen", "rewards/margins", "lr"]
    words = {name: metric_words(name) for name in logged}
    assert [name for name, text in words.items() if re.search(r"[/_]", text)] == []
    assert words["ppo/policy/clipfrac"] == "PPO: policy share clipped"
    assert words["env/reward_mean"] == "Reward (mean per answer)" and words["lr"] == "Learning rate"


def test_the_monitor_offers_metrics_by_their_words(ctx, db_path):
    from labeler.ui.tabs.train import monitor
    from storage import open_db

    db = open_db(db_path)
    run = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (1, 'ppo', 'succeeded')").lastrowid
    db.execute("INSERT INTO metrics (run_id, step, name, value) VALUES (?, 1, 'ppo/policy/clipfrac', 0.1)", [run])
    db.conn.close()
    listed = monitor.refresh(ctx, run, None, request=as_user(ADMIN))[list(monitor.REFRESHED).index("metric_names")]
    assert listed["choices"] == [("PPO: policy share clipped", "ppo/policy/clipfrac")]


def test_gradios_own_number_check_names_the_box():
    """gr.Number refuses a value below its minimum as "Value 0 is less than minimum value 1.", naming no box; the
    toast names the one that refused it, checked again on the sent values."""
    from types import SimpleNamespace

    from labeler.ui.soft_errors import refused_number

    with gr.Blocks():
        boxes = [gr.Number(label="Lowest score"), gr.Number(label="Answer length (tokens)", minimum=1, maximum=4096)]
    event = SimpleNamespace(inputs=boxes)
    assert refused_number(event, [1, 0], "Value 0 is less than minimum value 1.") == "Answer length (tokens)"
    assert refused_number(event, [1, 5000], "Value 5000 is greater than maximum value 4096.") == "Answer length (tokens)"
    assert refused_number(event, [1, 5], "Value 0 is less than minimum value 1.") is None  # no box says so


def test_data_text_shows_as_typed_in_the_apps_markdown():
    """An answer's own Markdown cut at 400 characters left a lone ** that bolded the page's next words from
    mid-word, and its newlines broke the list; a record shows it on one line, every Markdown character escaped."""
    from labeler.ui.field_labels import literal
    from labeler.ui.tabs.records.detail import detail_markdown

    answer = "x" * 396 + " **13.0 GiB** of memory\n# not a heading"
    detail = {"id": 7, "split": "train", "source": "e2e", "text": "Why is **this** so?", "items": [],
              "answers": [{"id": 3, "model": "my_model", "source": "gen", "text": answer}], "rankings": [],
              "ratings": [{"id": 1, "username": "ann", "response_id": 3, "score": 5, "comment": "too_long"}]}
    shown = detail_markdown(detail)
    assert "**Prompt**: Why is \\*\\*this\\*\\* so?" in shown
    answer_line = next(line for line in shown.splitlines() if line.startswith("- answer"))
    assert answer_line == f"- answer **3** (my\\_model): {'x' * 396} \\*\\*…"  # cut first, then escaped
    assert "_too\\_long_" in shown and "# not a heading" not in shown
    assert literal("a\n\nb  c", None) == "a b c"


def test_a_resolved_settings_help_is_whole():
    """The Train form's line under a setting, refreshed with where its value comes from, kept the help's first 200
    characters: four help texts ended mid-word."""
    from labeler import forms
    from labeler.services.settings.job_settings import JobConfig
    from labeler.ui.tabs.train.form import marked_help

    longest = max(forms.field_specs(JobConfig), key=lambda spec: len(spec.help or ""))
    assert len(longest.help) > 200
    assert marked_help(longest, "app default") == f"The app's value for this run. {longest.help}"
    assert marked_help(longest, None) == longest.help
