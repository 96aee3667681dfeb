"""Train tab: launch SFT / reward-model / DPO / PPO runs on the database's labels and watch them live.

The form is built from the config dataclasses (labeler/forms.py: the same fields as `rlhf-studio train --set`).
A launch queues a run (labeler.services.jobs), which a worker process executes; a gr.Timer re-reads the run's
row, metrics and samples from SQLite every few seconds, so a refresh, a second admin, or a server restart all
see the same thing. Every handler checks the logged-in user and the admin role itself.
"""
from __future__ import annotations

import gradio as gr
import pandas as pd

from labeler import forms
from labeler.services import evaluation, jobs, labeling, run_metrics, run_preview, runs, train_configs
from labeler.services.errors import InputError, PermissionDenied
from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import ui_errors

TITLE = "Train"
REFRESH_SECONDS = 2.0
# Shown beside the stage picker; each stage's own trainer fields come from its config class.
JOB_FIELDS = ["steps", "checkpoint_every", "lora", "bf16", "num_processes"]
DATA_FIELDS = ["annotators", "min_annotators", "min_agreement", "include_rating_pairs", "test_size"]
# The "PPO rewards" group, shown (and sent) only for a PPO run; the first row is where the reward comes from.
PPO_SOURCE_FIELDS = ["reward", "reward_model"]
PPO_FIELDS = ["reward_function", "subtract_query_score", "human_label", "human_share", "online_rm", "w_human", "w_rm",
              "human_timeout", "timeout_policy", "human_overlap", "max_new_tokens"]
# The stages in plain words (the Radio shows these, and sends the stage's name).
STAGE_LABELS = {"sft": "Imitate good answers (SFT)", "rm": "Reward model", "dpo": "Learn from preferences (DPO)",
                "ppo": "Reinforce with a reward (PPO)", "grpo": "Group-relative RL (GRPO)", "rloo": "Leave-one-out RL (RLOO)",
                "kto": "Learn from good/bad labels (KTO)"}
STAGE_NOTES = {
    "sft": "Fine-tunes the model on the answers people rated well.",
    "rm": "Trains a scorer on the rankings (and, if you like, the ratings): the reward that PPO, GRPO and RLOO use.",
    "dpo": "Tunes the model straight from the preference pairs, with no reward model.",
    "ppo": "Generates answers, scores them with the reward below, and moves the model towards higher rewards while "
           "staying close to where it started (KL).",
    "grpo": "Like PPO, but compares several answers to the same prompt instead of learning a value function.",
    "rloo": "Like GRPO, with each answer compared to the mean of the others.",
    "kto": "Tunes the model from answers labelled good or bad (ratings above or below the scale's midpoint).",
}
# The few settings of the short form besides the model and the steps: which labels it learns from.
SHORT_DATA_FIELDS = ["min_annotators", "include_rating_pairs"]
# Plain words for the settings a person meets; any other field is its name in words ("warmup steps").
PLAIN_LABELS = {
    "steps": "How long (training steps)", "checkpoint_every": "Save a checkpoint every N steps",
    "lora": "LoRA adapters (train a small add-on)", "bf16": "bfloat16 (faster on recent CPUs)",
    "num_processes": "Processes (CPU cores or GPUs)", "annotators": "Only these annotators' labels",
    "min_annotators": "Labelled by at least N people", "min_agreement": "Minimum agreement between annotators",
    "include_rating_pairs": "Also turn ratings into preference pairs", "test_size": "Share held out for testing",
    "reward": "Reward from", "reward_model": "Reward model", "reward_function": "Reward function",
    "subtract_query_score": "Score the answer alone (subtract the prompt's score)", "w_human": "Weight of people's ratings",
    "w_rm": "Weight of the reward model", "human_timeout": "Wait for people at most (seconds)",
    "timeout_policy": "When nobody answers in time", "human_overlap": "People per answer",
    "max_new_tokens": "Answer length (new tokens)", "learning_rate": "Learning rate",
    "per_device_train_batch_size": "Batch size", "batch_size": "Answers per step", "mini_batch_size": "Mini-batch size",
    "max_length": "Longest example (tokens)", "beta": "Stay close to the starting model (beta)",
    "init_kl_coef": "Stay close to the starting model (KL weight)", "adap_kl_ctrl": "Adapt the KL weight",
    "target": "Target KL", "ppo_epochs": "Passes over each batch", "loss_type": "Loss",
    "completion_only_loss": "Learn the answers only (not the prompts)", "packing": "Pack short examples together",
    "center_rewards_coefficient": "Keep rewards centred (weight)", "num_iterations": "Passes over each batch",
    "scale_rewards": "Scale rewards", "epsilon": "Clipping range", "normalize_advantages": "Normalise advantages",
    "desirable_weight": "Weight of good answers", "undesirable_weight": "Weight of bad answers",
}


def plain_label(name: str) -> str:
    return PLAIN_LABELS.get(name) or name.replace("_", " ").capitalize()


DEFAULT_METRICS = {"sft": ["loss"], "rm": ["loss", "accuracy"], "dpo": ["loss", "rewards/margins"],
                   "ppo": ["env/reward_mean", "objective/kl"], "grpo": ["reward", "kl"], "rloo": ["reward", "kl"],
                   "kto": ["loss", "kl"]}
# Stages whose rewards come from the "PPO rewards" group (reward source, model, people, function).
REWARD_STAGES = ("ppo", "grpo", "rloo")
HISTORY_COLUMNS = ["id", "stage", "status", "step", "total", "created", "by", "name"]
SAMPLE_COLUMNS = ["step", "query", "response", "reward"]
COMPARISON_COLUMNS = ["", "model", *evaluation.METRIC_LABELS.values()]
ANSWER_COLUMNS = ["prompt", "before", "after"]
LONG_TEXT_CHARS = 600  # a table cell shows at most this much of a prompt or an answer


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m {seconds % 60:02d}s"


def progress_html(run: runs.Run | None) -> str:
    if run is None:
        return ""
    total = run.total_steps or 0
    eta = run.eta_seconds()
    text = f"step {run.step} / {total or '?'}"
    if run.status == "running":
        text += f" · elapsed {_duration(run.elapsed_seconds())} · ETA {_duration(eta)}"
    elif run.finished and run.started_at:
        text += f" · took {_duration(run.elapsed_seconds())}"
    return (f"<div id='train-progress'><progress max='{max(total, 1)}' value='{min(run.step, max(total, 1))}' "
            f"style='width:100%'></progress><div>{text}</div></div>")


def shown_command(command: str) -> str:
    """The run's command as a person reads it: the interpreter by its name, not the server's absolute path to it
    (which tells a reader nothing but the server's layout); the rest as stored, so it can be run again."""
    import os
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if words and os.path.isabs(words[0]):
        words[0] = os.path.basename(words[0])
    return shlex.join(words)


def status_markdown(run: runs.Run | None) -> str:
    if run is None:
        return "No run selected. Launch one above, or pick one from the history."
    line = f"### Run #{run.id} · {run.stage} · **{run.status}**"
    if run.stop_requested and run.status == "running":
        line += " (stopping after this step)"
    details = [f"command: `{shown_command(run.command)}`" if run.command else "", f"output: `{run.output_dir}`"]
    if run.error:
        details.append(f"**error:** {run.error.splitlines()[-1]}")
    return "\n\n".join([line, *filter(None, details)])


def history_frame(db, project: str) -> pd.DataFrame:
    rows = [[r.id, r.stage, r.status, r.step, r.total_steps, r.created_at[:19].replace("T", " "), r.created_by or "",
             r.name] for r in runs.list_runs(db, project=project, limit=50)]
    return pd.DataFrame(rows, columns=HISTORY_COLUMNS)


def run_choices(db, project: str) -> list[tuple[str, int]]:
    return [(f"#{r.id} {r.stage} {r.status}", r.id) for r in runs.list_runs(db, project=project, limit=50)]


def waiting_banner(db, project: str) -> dict:
    """'Run #N is waiting for K rankings (Rank tab) and J ratings (Rate tab)' while a human-reward run waits."""
    parts = []
    for run in runs.list_runs(db, project=project, status="running"):
        waiting = {kind: labeling.waiting_for_run(db, run.id, kind) for kind in ("ranking", "rating")}
        asks = [f"**{n}** {kind}s in the **{'Rank' if kind == 'ranking' else 'Rate'}** tab"
                for kind, n in waiting.items() if n]
        if asks:
            parts.append(f"⏳ Training run **#{run.id}** is waiting for {' and '.join(asks)}.")
    return gr.update(value="\n\n".join(parts), visible=bool(parts))


# The default plots, each the first of its names that the run logged (stages name the same thing differently),
# in plain words: what a person watches during a run. The full list is one click away ("All metrics").
DEFAULT_PLOTS = [
    ("Reward", ["env/reward_mean", "reward", "rewards/margins"]),
    ("KL to the starting model", ["objective/kl", "kl"]),
    ("Human labels used", ["human/labels_used"]),
    ("Online reward model agrees with people", ["rm_online/agreement"]),
]
# Plain titles for metrics a person knows by another name; any other metric is titled by its own name.
METRIC_TITLES = {
    "env/reward_mean": "Reward (mean per answer)", "reward": "Reward (mean per answer)",
    "objective/kl": "KL to the starting model", "kl": "KL to the starting model", "loss": "Training loss",
    "accuracy": "Reward model accuracy (chosen above rejected)", "rewards/margins": "Reward margin (chosen - rejected)",
    "human/labels_used": "Human labels used", "rm_online/agreement": "Online reward model agrees with people",
}


def default_metrics(stage: str, names: list[str]) -> list[str]:
    """The metrics plotted when nobody picked any: the DEFAULT_PLOTS the run has and the stage's own (a reward
    model's loss and accuracy), else the first two."""
    chosen = [next(n for n in group if n in names) for _, group in DEFAULT_PLOTS if any(n in names for n in group)]
    chosen += [n for n in DEFAULT_METRICS.get(stage, []) if n in names and n not in chosen]
    return chosen or names[:2]


def metrics_html(frame: pd.DataFrame, names: list[str], positive_share: tuple[float | None, float | None] = (None, None)) -> str:
    """One small chart per metric (each on its own scale: a loss of 0.7 and a KL of 0.01 share no axis), titled
    in plain words with the metric's name in the legend; then the held-out positive share before and after,
    once the run's evaluation exists. Every refresh sends the whole thing, so it never shows a blank chart."""
    from labeler.ui.charts import Series, bar_chart_svg, line_chart_svg

    panels = []
    for name in names:
        rows = frame[frame["name"] == name] if len(frame) else frame
        points = tuple((float(step), float(value)) for step, value in zip(rows["step"], rows["value"]))
        panels.append(line_chart_svg([Series(name, points)], title=METRIC_TITLES.get(name, name)))
    before, after = positive_share
    if after is not None:
        bars = ([("before (base)", before)] if before is not None else []) + [("after", after)]
        panels.append(bar_chart_svg(bars, title="Positive share on held-out prompts", percent=True))
    if not panels:
        panels.append(line_chart_svg([], title="Metrics", empty_text="No metrics yet: they appear after the first step"))
    return "<div class='studio-charts'>" + "".join(f"<div class='studio-chart-panel'>{p}</div>" for p in panels) + "</div>"


def reward_curve_html(curve: pd.DataFrame | None) -> str:
    from labeler.ui.charts import Series, line_chart_svg

    points = () if curve is None else tuple(zip(curve["minutes"].astype(float), curve["reward"].astype(float)))
    return line_chart_svg([Series("env/reward_mean", points)], title="Mean reward by wall time",
                          x_title="minutes since the run started", x_integer=False,
                          empty_text="No rewards yet (policy runs log them)")


def positive_share(db, run_id: int | None) -> tuple[float | None, float | None]:
    """(before, after) held-out positive share of a finished run's evaluation; (None, None) without one."""
    if not run_id:
        return None, None
    before, after = evaluation.run_comparison(db, run_id)
    if after is None:
        return None, None
    return (before.metrics.get("eval/positive_share") if before else None), after.metrics.get("eval/positive_share")


def comparison_frame(db, run_id: int | None) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The run's before/after evaluation (the base vs the trained model on the held-out prompts): metrics,
    the first answers side by side, and a line saying what was measured (or why there is nothing)."""
    empty = pd.DataFrame(columns=COMPARISON_COLUMNS), pd.DataFrame(columns=ANSWER_COLUMNS)
    if not run_id:
        return (*empty, "")
    before, after = evaluation.run_comparison(db, run_id)
    if after is None:
        return (*empty, "No held-out evaluation for this run (policy runs are evaluated when they finish, on the "
                        "project's split 'test'; `rlhf-studio eval` evaluates any model).")
    rows = evaluation.comparison_rows([before, after], ["before (base)", "after"])
    metrics = pd.DataFrame(rows, columns=COMPARISON_COLUMNS).round(3)
    settings = after.settings
    n = settings["samples"]
    answers = []
    for p in range(min(5, settings["prompts_n"])):
        row = after.samples[p * n]
        prompt = row["prompt"][-1]["content"] if isinstance(row["prompt"], list) else row["prompt"]
        answers.append([prompt, before.samples[p * n]["answer"] if before else "", row["answer"]])
    note = (f"{settings['prompts_n']} held-out prompts x {n} answers, {settings['max_new_tokens']} new tokens, "
            f"reward `{settings['reward']}`, positive: reward > {settings['threshold']:g}; KL to "
            f"`{after.kl_base}` in nats per answer.")
    return metrics, pd.DataFrame(answers, columns=ANSWER_COLUMNS), note


def collect_settings(stage: str, specs_by_stage: dict, values: list, advanced: str) -> dict:
    """Form values -> raw settings (only what differs from a default), plus the advanced key=value lines."""
    settings = {}
    ppo_only = set(PPO_SOURCE_FIELDS + PPO_FIELDS)
    job_values = forms.from_widgets(specs_by_stage["job"], values[: len(specs_by_stage["job"])])
    settings.update({name: value for name, value in job_values.items() if stage in REWARD_STAGES or name not in ppo_only})
    offset = len(specs_by_stage["job"])
    for name in train_configs.STAGES:
        specs = specs_by_stage[name]
        chunk = values[offset: offset + len(specs)]
        offset += len(specs)
        if name == stage:
            settings.update(forms.from_widgets(specs, chunk))
    defaults = {spec.name: spec.default for key in ("job", stage) for spec in specs_by_stage[key]}
    settings = {k: v for k, v in settings.items() if not _same(v, defaults.get(k))}
    lines = [line.strip() for line in (advanced or "").splitlines() if line.strip() and not line.strip().startswith("#")]
    settings.update(forms.parse_sets(lines))
    return settings


def _same(value, default) -> bool:
    if value in ("", None) and default in ("", None):
        return True
    try:
        return value == default or (isinstance(default, (int, float)) and float(value) == float(default))
    except (TypeError, ValueError):
        return False


def build(ctx: UIContext) -> None:
    project = ctx.project
    job_specs = forms.field_specs(train_configs.JobConfig, JOB_FIELDS + DATA_FIELDS + PPO_SOURCE_FIELDS + PPO_FIELDS)
    job_spec_by_name = {spec.name: spec for spec in job_specs}
    specs_by_stage = {"job": job_specs}
    for stage in train_configs.STAGES:
        specs_by_stage[stage] = forms.field_specs(train_configs.stage_config_class(stage), train_configs.form_fields(stage))
    with ctx.connection() as db:
        jobs.poll(db)  # on app start: runs whose worker died while the server was down are marked failed

    banner = gr.Markdown(visible=False, elem_id="train-waiting-banner")
    # A short form per trainer: what it trains, from which model, on which labels, with which reward, for how
    # long, in plain words; every other setting (the same fields, through the same forms mapping) is folded
    # under "Advanced settings", so a first run needs no knowledge of the rest.
    gr.Markdown("### Start a run")
    with gr.Row():
        stage = gr.Radio([(STAGE_LABELS.get(name, name), name) for name in train_configs.STAGES], value="rm",
                         label="What to train", scale=3, elem_id="train-stage")
    stage_note = gr.Markdown(STAGE_NOTES["rm"], elem_id="train-stage-note", elem_classes=["studio-hint"])
    job_widgets = {}

    def job_row(names: list[str]) -> None:
        with gr.Row():
            for name in names:  # elem_id "train-reward" for the field reward, etc.: what the browser tests find
                job_widgets[name] = forms.widget(job_spec_by_name[name], label=plain_label(name),
                                                 elem_id="train-" + name.replace("_", "-"))

    with gr.Row():
        model = gr.Dropdown([], value="default-encoder", label="Start from model", allow_custom_value=True,
                            info="a registered model, 'default' (the embedded chat model) or 'default-encoder'",
                            scale=2, elem_id="train-model")
        job_widgets["steps"] = forms.widget(job_spec_by_name["steps"], label=plain_label("steps"), scale=1,
                                            elem_id="train-steps")
    job_row(SHORT_DATA_FIELDS)
    with gr.Group(visible=False) as ppo_group:
        gr.Markdown("**Where the reward comes from**")
        job_row(PPO_SOURCE_FIELDS + ["reward_function"])
    stage_groups, stage_widgets = {}, {}
    with gr.Accordion("Advanced settings", open=False, elem_id="train-advanced-settings"):
        job_row([name for name in JOB_FIELDS if name != "steps"])
        job_row([name for name in DATA_FIELDS if name not in SHORT_DATA_FIELDS])
        with gr.Group(visible=False) as ppo_advanced:
            job_row([name for name in PPO_FIELDS if name != "reward_function"])
        gr.Markdown("**Trainer settings**")
        for name in train_configs.STAGES:
            with gr.Group(visible=name == "rm") as group:
                with gr.Row():
                    stage_widgets[name] = [forms.widget(spec, label=plain_label(spec.name))
                                           for spec in specs_by_stage[name]]
            stage_groups[name] = group
        advanced = gr.Textbox(label="More settings (one setting=value per line; any field of the stage's config)",
                              lines=2, placeholder="warmup_steps=5\nweight_decay=0.01", elem_id="train-advanced")
    with gr.Row():
        launch = gr.Button("Launch run", variant="primary", elem_id="train-launch")
        preview = gr.Button("What will this run use?", elem_id="train-preview")
        demo_button = gr.Button("Run the demo (RM + PPO on the embedded models)", elem_id="train-demo")
    notice = gr.Markdown(elem_id="train-notice")

    gr.Markdown("## Runs")
    with gr.Row():
        run = gr.Dropdown([], value=None, label="Run", scale=3, elem_id="train-run")
        stop = gr.Button("Early stop (keep model)", scale=1)
        cancel = gr.Button("Cancel", variant="stop", scale=1)
        resume = gr.Button("Resume", scale=1)
    status = gr.Markdown(elem_id="train-status")
    progress = gr.HTML()
    # Drawn on the server as SVG (metrics_html): the default plots, or those picked under "All metrics".
    plot = gr.HTML(metrics_html(pd.DataFrame(columns=["step", "name", "value"]), []), elem_id="train-plot")
    with gr.Accordion("All metrics (pick which to plot)", open=False):
        metric_names = gr.CheckboxGroup([], value=[], label="Metrics", elem_id="train-metrics")
    reward_curve = gr.HTML(reward_curve_html(None), elem_id="train-reward-curve")
    gr.Markdown("**Held-out evaluation: the base model before, the trained model after**")
    eval_note = gr.Markdown(elem_id="train-eval-note")
    comparison = gr.Dataframe(pd.DataFrame(columns=COMPARISON_COLUMNS), interactive=False,
                              elem_id="train-comparison")
    # Widths fixed in percent and long texts wrapped: sized by their content, the long answers
    # made 1952 px tables in a 1214 px page and pushed "after" and "reward" out of sight.
    comparison_answers = gr.Dataframe(pd.DataFrame(columns=ANSWER_COLUMNS), label="First held-out answers",
                                      interactive=False, wrap=True, column_widths=["30%", "35%", "35%"],
                                      max_chars=LONG_TEXT_CHARS, elem_id="train-answers")
    samples = gr.Dataframe(pd.DataFrame(columns=SAMPLE_COLUMNS), label="Samples (latest steps)", wrap=True,
                           interactive=False, column_widths=["8%", "35%", "45%", "12%"], max_chars=LONG_TEXT_CHARS,
                           elem_id="train-samples")
    log = gr.Code(label="Log (tail)", language=None, lines=12, interactive=False)
    history = gr.Dataframe(pd.DataFrame(columns=HISTORY_COLUMNS), label="Run history", interactive=False)

    with gr.Accordion("Inspect a reward model", open=False):
        inspect_model = gr.Dropdown([], value=None, label="Reward model", allow_custom_value=True)
        inspect_prompt = gr.Textbox(label="Prompt", value="I watched this film last night and")
        inspect_responses = gr.Textbox(label="Responses (one per line)", lines=3,
                                       value="it was a wonderful, moving experience.\nit was a boring waste of time.")
        with gr.Row():
            score_button = gr.Button("Score side by side")
            agree_button = gr.Button("Agreement with human labels + score distribution")
        scores_table = gr.Dataframe(pd.DataFrame(columns=["response", "score"]), interactive=False, wrap=True)
        agreement_md = gr.Markdown()
        distribution = gr.BarPlot(pd.DataFrame({"score": [], "count": []}), x="score", y="count",
                                  label="Score distribution over the project's answers", height=240)

    # ---- handlers ---------------------------------------------------------------------------------
    trainer_inputs = [w for name in train_configs.STAGES for w in stage_widgets[name]]
    job_inputs = [job_widgets[spec.name] for spec in job_specs]

    @ui_errors
    @requires(ctx, "admin")
    def load_choices(request: gr.Request):
        with ctx.connection() as db:
            from labeler.services import models

            names = [m["name"] for m in models.list_models(db)]
            rewards = [m["name"] for m in models.list_models(db, kind="reward")]
            runs = run_choices(db, project)
        return (gr.update(choices=[*names, "default-encoder"]), gr.update(choices=rewards),
                gr.update(choices=rewards, value=rewards[-1] if rewards else None),
                gr.update(choices=runs, value=runs[0][1] if runs else None))

    def on_stage(name: str):
        return (gr.update(value="default-encoder" if name == "rm" else "default"), gr.update(visible=name in REWARD_STAGES),
                gr.update(visible=name in REWARD_STAGES), STAGE_NOTES.get(name, ""),
                *[gr.update(visible=name == s) for s in train_configs.STAGES])

    def form_settings(data: dict) -> tuple[str, dict]:
        """(stage, settings) from the form. Inputs given as a set arrive as one {component: value} dict (the form
        has a variable number of fields)."""
        stage_name = data[stage]
        settings = collect_settings(stage_name, specs_by_stage, [data[w] for w in job_inputs + trainer_inputs],
                                    data[advanced])
        settings["model"] = data[model] or ""
        return stage_name, settings

    @ui_errors
    @requires(ctx, "admin")
    def do_preview(data: dict, request: gr.Request):
        with ctx.connection() as db:
            stage_name, settings = form_settings(data)
            return run_preview.preview_run(db, project, stage_name, settings).markdown()

    @ui_errors
    @requires(ctx, "admin")
    def do_launch(data: dict, request: gr.Request):
        with ctx.connection() as db:
            stage_name, settings = form_settings(data)
            # A time budget becomes the steps that fit it, as the preview said (the CLI's train does the same).
            settings, _ = run_preview.apply_time_budget(db, project, stage_name, settings)
            created = jobs.create_run(db, stage_name, settings, project=project, username=ctx.username(request),
                                      runs_dir=ctx.settings.runs_dir, from_web=True)
            choices = run_choices(db, project)
        where = "started" if created.status == "running" else "queued (another run is in progress)"
        return f"Run **#{created.id}** {where}.", gr.update(choices=choices, value=created.id)

    def refresh(run_id, selected, request: gr.Request):
        """The timer's tick: everything shown about the selected run, read back from SQLite."""
        try:
            check_role(ctx, request, "admin")  # here, not @requires: a refused tick changes nothing
            with ctx.connection() as db:
                jobs.poll(db)
                return _refresh(db, run_id, selected)
        except (PermissionDenied, InputError):
            return tuple(gr.update() for _ in refresh_outputs)

    def _refresh(db, run_id, selected):
        if not run_id:  # nothing picked yet: follow the newest run
            newest = runs.list_runs(db, project=project, limit=1)
            run_id = newest[0].id if newest else None
        current = runs.get_run(db, run_id) if run_id else None
        names = run_metrics.metric_names(db, run_id) if current else []
        chosen = [n for n in (selected or []) if n in names] or default_metrics(current.stage if current else "", names)
        frame = (run_metrics.metrics_frame(db, run_id, chosen) if current
                 else pd.DataFrame(columns=["step", "name", "value"]))
        curve = evaluation.reward_curve(db, run_id) if current else None
        metrics_table, answers_table, note = comparison_frame(db, run_id if current and current.finished else None)
        rows = run_metrics.samples(db, run_id, 12) if current else []
        return (
            waiting_banner(db, project),
            status_markdown(current),
            progress_html(current),
            gr.update(choices=names, value=chosen),
            metrics_html(frame, chosen, positive_share(db, run_id if current and current.finished else None)),
            pd.DataFrame(rows, columns=SAMPLE_COLUMNS).round({"reward": 3}),
            run_metrics.log_tail(current, 40) if current else "",
            history_frame(db, project),
            # Choices only: a tick that started before a launch finished must not reset the picked run.
            gr.update(choices=run_choices(db, project)),
            reward_curve_html(curve),
            metrics_table,
            answers_table,
            note,
        )

    def _action(action, verb):
        @ui_errors
        @requires(ctx, "admin")
        def handler(run_id, request: gr.Request):
            with ctx.connection() as db:
                if not run_id:
                    raise InputError("pick a run first", field="run")
                result = action(db, int(run_id))
            return f"Run **#{result.id}** {verb}: {result.status}."
        return handler

    @ui_errors
    @requires(ctx, "admin")
    def do_demo(request: gr.Request):
        from pathlib import Path

        from labeler.services import demo

        out = str(Path(ctx.settings.runs_dir) / "demo")
        pid = demo.launch_demo_process(ctx.db_path, out)
        return (f"Demo started (pid {pid}) in the project `{demo.DEMO_PROJECT}`: it generates answers, labels them "
                f"with a simulated annotator, then queues a reward-model run and a PPO run (`rlhf-studio runs list`, "
                f"or this tab when serving `--project {demo.DEMO_PROJECT}`). Log: `{out}/demo.log`.")

    @ui_errors
    @requires(ctx, "admin")
    def do_score(name, prompt, responses_text, request: gr.Request):
        from labeler.services import reward_inspect

        with ctx.connection() as db:
            if not name:
                raise InputError("pick a reward model", field="reward model")
            scorer = reward_inspect.load_scorer(db, name)
        rows = reward_inspect.score_side_by_side(scorer, prompt, (responses_text or "").splitlines())
        return pd.DataFrame(rows, columns=["response", "score"])

    @ui_errors
    @requires(ctx, "admin")
    def do_agreement(name, request: gr.Request):
        from labeler.services import reward_inspect

        with ctx.connection() as db:
            if not name:
                raise InputError("pick a reward model", field="reward model")
            scorer = reward_inspect.load_scorer(db, name)
            result = reward_inspect.agreement(db, scorer, project)
            scores = reward_inspect.score_distribution(db, scorer, project)
        where = "held-out prompts (split test)" if result["heldout"] else "all prompts (no held-out split: optimistic)"
        text = (f"**{result['pairs']}** human-ranked pairs on {where}: the reward model agrees on "
                f"**{result['accuracy']:.0%}**, mean margin {result['mean_margin']:.3f}."
                if result["pairs"] else "No ranked pairs to compare with yet.")
        histogram = reward_inspect.score_histogram([row["score"] for row in scores])
        return text, pd.DataFrame({"score": [f"{mid:.2f}" for mid, _ in histogram],
                                   "count": [count for _, count in histogram]})

    timer = gr.Timer(REFRESH_SECONDS)
    refresh_outputs = [banner, status, progress, metric_names, plot, samples, log, history, run, reward_curve,
                       comparison, comparison_answers, eval_note]
    refresh_inputs = [run, metric_names]
    if ctx.app is not None:
        ctx.app.load(quiet_on_load(load_choices, 4), None, [model, job_widgets["reward_model"], inspect_model, run],
                     api_name="train_choices")
    stage.change(on_stage, stage, [model, ppo_group, ppo_advanced, stage_note, *stage_groups.values()], api_name=False)
    launch.click(do_launch, {stage, model, advanced, *job_inputs, *trainer_inputs},
                 [notice, run], api_name="train_launch")
    preview.click(do_preview, {stage, model, advanced, *job_inputs, *trainer_inputs}, notice,
                  api_name="train_preview")
    timer.tick(refresh, refresh_inputs, refresh_outputs, api_name="train_refresh", show_progress="hidden")
    run.input(refresh, refresh_inputs, refresh_outputs, api_name="train_select", show_progress="hidden")
    metric_names.input(refresh, refresh_inputs, refresh_outputs, api_name="train_metrics", show_progress="hidden")
    stop.click(_action(jobs.request_stop, "asked to stop after the current step"), run, notice, api_name="train_stop")
    cancel.click(_action(jobs.cancel_run, "cancelled"), run, notice, api_name="train_cancel")
    resume.click(_action(jobs.resume_run, "resumed"), run, notice, api_name="train_resume")
    demo_button.click(do_demo, None, notice, api_name="train_demo")
    score_button.click(do_score, [inspect_model, inspect_prompt, inspect_responses], scores_table,
                       api_name="reward_score")
    agree_button.click(do_agreement, inspect_model, [agreement_md, distribution], api_name="reward_agreement")
