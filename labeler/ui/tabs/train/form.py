"""The Train tab's launch form: what to train, from which model, on which labels, with which reward (online DPO: who
judges its pairs), for how long.

Built from the config dataclasses (labeler/forms.py: the same fields as `rlhf-studio train --set`): a short form
in plain words, every other setting of the same fields folded under "Advanced settings". Its handlers preview a
run and queue it (labeler.services.training.jobs).
"""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler import forms
from labeler.services.settings import job_settings, reward_spec, training_stages
from labeler.services.training import jobs, run_preview, run_settings, train_configs
from labeler.errors import InputError, PermissionDenied
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.field_labels import TRAIN_LABELS
from labeler.ui.model_choices import judge_choices, registered_judges
from labeler.ui.roles import check_role, requires
from labeler.ui.soft_errors import ui_errors
from labeler.ui.tabs.train import waiting
from labeler.ui.tabs.train.run_views import run_choices

# The short form: besides the model and the steps, which labels a run learns from and where its reward comes
# from. Every other setting of the job's sections (job_settings.SECTIONS) that the web may set is folded under
# "Advanced settings", one group per section, shown for the stages that read it.
SHORT_DATA_FIELDS = ["min_annotators", "include_rating_pairs"]
SHORT_REWARD_FIELDS = ["reward"]
SHORT_FIELDS = ["steps", *SHORT_DATA_FIELDS, *SHORT_REWARD_FIELDS]
# Where the reward comes from is one widget, "Reward", whose values are reward_spec's specs (rm:NAME, vader, ...),
# sent as `--set reward=SPEC` sends them: the service spells a spec out into these two fields, so the form has
# no widget of its own for them (one still given in "More settings" is checked against the spec).
SPELLED_BY_REWARD = ("reward_model", "reward_function")
# The stages in plain words (the Radio shows these, and sends the stage's name), and the line under it: each
# stage's own (training_stages/).
STAGE_LABELS = {name: stage.label for name, stage in training_stages.STAGES.items()}
STAGE_NOTES = {name: stage.note for name, stage in training_stages.STAGES.items()}
# Plain words for the settings a person meets; any other field is its name in words ("warmup steps").
PLAIN_LABELS = TRAIN_LABELS
# Every setting's widget: studio.css gives it a minimum width (Gradio 6.31 gives a Checkbox none, so bfloat16 and
# LoRA were squeezed to 30 px in a row of numbers, their help one word a line).
SETTING = ["studio-setting"]
# The stage the form opens with.
FIRST_STAGE = "rm"
# Stages that ask where their reward comes from (the short form's reward row).
REWARD_STAGES = job_settings.RewardSettings.STAGES
# The stage whose trainer setting `judge` (who picks the better answer of each pair) is the short form's Judge
# picker, in the reward row's place: a trainer field, so not in the job's widgets.
JUDGE_STAGE = "online-dpo"


def plain_label(name: str) -> str:
    return PLAIN_LABELS.get(name) or name.replace("_", " ").capitalize()


def section_fields(section) -> list[str]:
    """The section's settings the form shows: those the web may set (train_configs.WEB_JOB_SETTINGS), but the
    base model, which has its own picker, and the fields the Reward spec says (SPELLED_BY_REWARD)."""
    return [name for name in job_settings.section_names(section)
            if name in train_configs.WEB_JOB_SETTINGS and name != "model" and name not in SPELLED_BY_REWARD]


def form_specs() -> dict[str, list[forms.FieldSpec]]:
    """The form's fields: "job" (each section's section_fields, in job_settings.SECTIONS' order) and each stage's
    trainer fields (train_configs.form_fields)."""
    specs = {"job": [spec for section in job_settings.SECTIONS
                     for spec in forms.field_specs(section, section_fields(section))]}
    for stage in train_configs.STAGES:
        specs[stage] = forms.field_specs(train_configs.stage_config_class(stage), train_configs.form_fields(stage))
    return specs


def collect_settings(stage: str, specs_by_stage: dict, values: list, advanced: str, resolve=None,
                     picked: dict | None = None) -> dict:
    """Form values -> raw settings, plus the advanced key=value lines (which win). A job setting is sent only for
    the stages its section is read by (a hidden reward group sends nothing). `picked`: the stage's pickers that are
    no field widget (online DPO's judge), always sent as shown unless blank or given in the advanced lines.

    With `resolve` (typed settings -> run_settings.ResolvedRun), a value is sent whenever it differs from what the
    run would resolve without it, so the run uses every value the form shows and a value typed at a class default
    is kept (the app's default would have overruled it); values the resolution gives anyway are left to it (their
    source stays "app default", "project" or "recipe"). The reward picker is always sent. Without `resolve` (no
    database at hand): what differs from the class defaults."""
    job_values = forms.from_widgets(specs_by_stage["job"], values[: len(specs_by_stage["job"])])
    settings = {name: value for name, value in job_values.items() if stage in job_settings.section_of(name).STAGES}
    offset = len(specs_by_stage["job"])
    for name in train_configs.STAGES:
        specs = specs_by_stage[name]
        chunk = values[offset: offset + len(specs)]
        offset += len(specs)
        if name == stage:
            settings.update(forms.from_widgets(specs, chunk))
    lines = [line.strip() for line in (advanced or "").splitlines() if line.strip() and not line.strip().startswith("#")]
    typed = forms.parse_sets(lines)
    typed = {**{name: value for name, value in (picked or {}).items() if value not in ("", None)}, **typed}
    if resolve is None:
        defaults = {spec.name: spec.default for key in ("job", stage) for spec in specs_by_stage[key]}
        return {**{k: v for k, v in settings.items() if not _same(v, defaults.get(k))}, **typed}
    typed.update({name: settings[name] for name in ALWAYS_SENT if name in settings and name not in typed})
    # A value's resolution depends on others (PPO's learning rate on the reward and human_label): settle in rounds.
    for _ in range(len(settings) + 1):
        resolved = resolve(typed).values()
        differing = {name: value for name, value in settings.items()
                     if name not in typed and not _same(value, resolved.get(name))}
        if not differing:
            break
        typed.update(differing)
    return typed


# Sent as chosen, whatever it resolves to: where the reward comes from (the CLI's `--set reward=`).
ALWAYS_SENT = ("reward",)


def _same(value, default) -> bool:
    if value in ("", None) and default in ("", None):
        return True
    try:
        return value == default or (isinstance(default, (int, float)) and float(value) == float(default))
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class LaunchForm:
    """The form's widgets. Its inputs reach the handlers as one {component: value} dict (`inputs`), since the
    number of fields differs by stage and grows with the configs."""
    specs_by_stage: dict[str, list[forms.FieldSpec]]
    stage: gr.Radio
    stage_note: gr.Markdown
    model: gr.Dropdown
    job_widgets: dict[str, gr.components.Component]  # JobConfig's fields by name
    reward_group: gr.Group  # where the reward comes from: shown for REWARD_STAGES
    section_groups: dict[str, gr.Group]  # each job section's advanced settings, by title, shown for its STAGES
    stage_groups: dict[str, gr.Group]  # each stage's trainer settings, shown for that stage
    stage_widgets: dict[str, list[gr.components.Component]]
    advanced: gr.Textbox  # "More settings": setting=value lines
    judge_group: gr.Group  # who judges an online DPO run's pairs: shown for JUDGE_STAGE
    judge: gr.Dropdown  # its values are `judge` settings (model_choices.judge_choices), sent as --set judge= sends them

    @property
    def job_inputs(self) -> list:
        return [self.job_widgets[spec.name] for spec in self.specs_by_stage["job"]]

    @property
    def trainer_inputs(self) -> list:
        return [widget for name in train_configs.STAGES for widget in self.stage_widgets[name]]

    @property
    def inputs(self) -> set:
        return {self.stage, self.model, self.advanced, self.judge, *self.job_inputs, *self.trainer_inputs}

    @property
    def refreshed_outputs(self) -> list:
        """What refresh_values sets: the refreshed job settings, then every stage's trainer widgets."""
        return [*(self.job_widgets[name] for name in REFRESHED_JOB_FIELDS), *self.trainer_inputs]

    def settings(self, data: dict, db=None, project: str = "") -> tuple[str, dict]:
        """(stage, raw settings) from the form's values, as collect_settings reads them (resolved in `project`
        when a `db` is given), plus the base model."""
        stage_name = data[self.stage]
        model = {"model": data[self.model] or ""}
        resolve = None if db is None else (
            lambda typed: run_settings.resolve_run(db, project, stage_name, {**typed, **model}))
        # The judge as shown, whatever it resolves to: the untouched form's run is judged by the judge it showed.
        picked = {"judge": data[self.judge]} if stage_name == JUDGE_STAGE else {}
        settings = collect_settings(stage_name, self.specs_by_stage,
                                    [data[w] for w in self.job_inputs + self.trainer_inputs], data[self.advanced],
                                    resolve, picked)
        return stage_name, {**settings, **model}


def reward_widget(spec: forms.FieldSpec) -> gr.Dropdown:
    """The one "Reward" picker: its values are reward specs (reward_spec.choices; the tab adds the registered reward
    models on load). A typed spec is accepted as `--set reward=` takes it, a module:function refused on launch."""
    return gr.Dropdown(reward_spec.choices([]), value=spec.default, label=plain_label("reward"),
                       allow_custom_value=True, elem_id="train-reward",
                       info="Where the rewards come from: a built-in function, people, or a reward model")


def judge_widget(shown) -> gr.Dropdown:
    """The "Judge" picker of an online DPO run: people, people where the reward model is unsure, a reward model or a
    built-in function (model_choices.judge_choices; the tab fills in the registered reward models on load and when
    a stage is picked). `shown`: the stage's ResolvedRun (its judge is the picker's first value), or None. A typed
    value is taken as `--set judge=` takes it, a module:function refused on launch (the web may not name code)."""
    value = shown.values().get("judge") if shown is not None else None
    return gr.Dropdown(judge_choices([]), value=value or "rm", label=plain_label("judge"), allow_custom_value=True,
                       elem_id="train-judge", info="Who picks the better of each prompt's two answers: people in "
                       "the Rank tab, people where the reward model is least sure, a reward model, or a function")


# Where a shown value comes from, in words (train_configs.SOURCES), before the field's help.
SOURCE_WORDS = {"class default": "Default", "app default": "The app's value for this run", "project": "The project's",
                "recipe": "The recipe's", "typed": "Set"}


def marked_help(spec: forms.FieldSpec, source: str | None) -> str | None:
    """The line under a setting: where its value comes from (when not the plain default), then its help."""
    words = SOURCE_WORDS.get(source or "class default")
    # The whole help: cut at 200 characters, a refresh ended help texts mid-word ("Blank: t", "off: the train").
    text = spec.help if source in (None, "class default") else f"{words}. {spec.help}"
    return text or None


def shown_settings(db, project: str, stage: str, typed: dict | None = None):
    """The run the form shows for `stage` with `typed` (the reward picked, the model, "More settings"): its
    resolved values and where each came from (run_settings.resolve_run); None when it cannot be resolved (the form
    then shows the class defaults, and Preview says why)."""
    try:
        return run_settings.resolve_run(db, project, stage, typed or {})
    except InputError:
        return None


def build_form(shown: dict | None = None) -> LaunchForm:
    """The form's widgets, in the order they show (the Launch and Preview buttons are the tab's, in one row with
    the demo's). `shown`: each stage's ResolvedRun (shown_settings) whose values the widgets start with, the job
    widgets the first stage's (the Rewards section's a policy stage's)."""
    specs_by_stage = form_specs()
    job_spec_by_name = {spec.name: spec for spec in specs_by_stage["job"]}
    shown = shown or {}

    def start(stage: str, spec: forms.FieldSpec) -> dict:
        """The widget's value and its marked help, as `stage` resolves it."""
        resolved = shown.get(stage)
        if resolved is None:
            return {}
        return {"value": resolved.values().get(spec.name), "info": marked_help(spec, resolved.source(spec.name))}

    def job_start(spec: forms.FieldSpec) -> dict:
        reads = job_settings.section_of(spec.name).STAGES
        return start(FIRST_STAGE if FIRST_STAGE in reads else reads[0], spec)
    # A short form per trainer: what it trains, from which model, on which labels, with which reward, for how
    # long, in plain words; every other setting (the same fields, through the same forms mapping) is folded
    # under "Advanced settings", so a first run needs no knowledge of the rest.
    gr.Markdown("### Start a run")
    with gr.Row():
        stage = gr.Radio([(STAGE_LABELS.get(name, name), name) for name in train_configs.STAGES], value=FIRST_STAGE,
                         label="What to train", scale=3, elem_id="train-stage")
    stage_note = gr.Markdown(STAGE_NOTES["rm"], elem_id="train-stage-note", elem_classes=["studio-hint"])
    job_widgets = {}

    def job_row(names: list[str]) -> None:
        with gr.Row():
            for name in names:  # elem_id "train-min-annotators" for min_annotators, etc.: what browser tests find
                job_widgets[name] = forms.widget(job_spec_by_name[name], label=plain_label(name),
                                                 elem_id="train-" + name.replace("_", "-"), elem_classes=SETTING,
                                                 **job_start(job_spec_by_name[name]))

    with gr.Row():
        model = gr.Dropdown([], value=training_stages.get("rm").default_model, label="Start from model",
                            allow_custom_value=True, info="a registered model, 'default' (the embedded chat model) or 'default-encoder'",
                            scale=2, elem_id="train-model")
        job_widgets["steps"] = forms.widget(job_spec_by_name["steps"], label=plain_label("steps"), scale=1,
                                            elem_id="train-steps", **job_start(job_spec_by_name["steps"]))
    job_row(SHORT_DATA_FIELDS)
    with gr.Group(visible=False) as reward_group:
        gr.Markdown("**Where the reward comes from**")
        with gr.Row():
            job_widgets["reward"] = reward_widget(job_spec_by_name["reward"])
    with gr.Group(visible=False) as judge_group:
        gr.Markdown("**Who judges the pairs**")
        with gr.Row():
            judge = judge_widget(shown.get(JUDGE_STAGE))
    section_groups, stage_groups, stage_widgets = {}, {}, {}
    with gr.Accordion("Advanced settings", open=False, elem_id="train-advanced-settings"):
        for section in job_settings.SECTIONS:
            with gr.Group(visible="rm" in section.STAGES) as group:
                gr.Markdown(f"**{section.TITLE} settings**")
                job_row([name for name in section_fields(section) if name not in SHORT_FIELDS])
            section_groups[section.TITLE] = group
        gr.Markdown("**Trainer settings**")
        for name in train_configs.STAGES:
            with gr.Group(visible=name == "rm") as group:
                with gr.Row():
                    stage_widgets[name] = [forms.widget(spec, label=plain_label(spec.name), elem_classes=SETTING,
                                                        **start(name, spec))
                                           for spec in specs_by_stage[name]]
            stage_groups[name] = group
        advanced = gr.Textbox(label="More settings (one setting=value per line; any field of the stage's config)",
                              lines=2, placeholder="warmup_steps=5\nweight_decay=0.01", elem_id="train-advanced")
    return LaunchForm(specs_by_stage, stage, stage_note, model, job_widgets, reward_group, section_groups,
                      stage_groups, stage_widgets, advanced, judge_group, judge)


def show_stage(name: str) -> tuple:
    """The form for stage `name`: its default base model, the reward row for a policy stage, the job sections it
    reads, the stage's note, its trainer settings and online DPO's judge row (outputs: model, reward_group, each
    section's group, stage_note, each stage's group, judge_group)."""
    return (gr.update(value=training_stages.get(name).default_model), gr.update(visible=name in REWARD_STAGES),
            *[gr.update(visible=name in section.STAGES) for section in job_settings.SECTIONS], STAGE_NOTES.get(name, ""),
            *[gr.update(visible=name == s) for s in train_configs.STAGES], gr.update(visible=name == JUDGE_STAGE))


@ui_errors
@requires("admin")
def refresh_judges(ctx: UIContext, request: gr.Request) -> dict:
    """The Judge picker's choices read again (on page load and when a stage is picked), its value kept: a reward
    model registered since the page loaded (a finished run, Admin > Models, the CLI) is offered by name."""
    with ctx.connection() as db:
        return gr.update(choices=registered_judges(db))


def load_judges(ctx: UIContext, request: gr.Request) -> dict:
    """refresh_judges on page load: for an annotator (no Train tab) nothing changes and no toast shows."""
    try:
        check_role(ctx, request, "admin")
    except PermissionDenied:
        return gr.update()
    with ctx.connection() as db:
        return gr.update(choices=registered_judges(db))


# The job settings whose resolved value differs by stage or reward (the rest keep what the person set): how long
# (rm and dpo: passes over the labels) and the answer length (the project's, or a recipe's).
REFRESHED_JOB_FIELDS = ("steps", "max_new_tokens")


@ui_errors
@requires("admin")
def refresh_values(ctx: UIContext, form: LaunchForm, stage: str, reward: str, model: str, advanced: str,
                   request: gr.Request) -> tuple:
    """After a stage or a reward is picked: the values the run would use (the stage's trainer settings, its steps
    and answer length), each marked where it comes from (outputs: refreshed_outputs)."""
    lines = [line.strip() for line in (advanced or "").splitlines() if line.strip() and not line.strip().startswith("#")]
    typed = {**forms.parse_sets(lines), "model": model or ""}
    if stage in REWARD_STAGES and reward:
        typed.setdefault("reward", reward)
    with ctx.connection() as db:
        resolved = shown_settings(db, ctx.project, stage, typed)
    if resolved is None:  # a setting the run refuses: Preview and Launch say which
        return tuple(gr.skip() for _ in form.refreshed_outputs)
    job_specs = {spec.name: spec for spec in form.specs_by_stage["job"]}
    updates = [gr.update(value=resolved.values()[name], info=marked_help(job_specs[name], resolved.source(name)))
               for name in REFRESHED_JOB_FIELDS]
    for name in train_configs.STAGES:
        for spec in form.specs_by_stage[name]:
            updates.append(gr.update(value=resolved.values()[spec.name], info=marked_help(spec, resolved.source(spec.name)))
                           if name == stage else gr.skip())
    return tuple(updates)


@ui_errors
@requires("admin")
def preview_run(ctx: UIContext, form: LaunchForm, data: dict, request: gr.Request, estimate: bool = True) -> str:
    """What a run with the form's settings would use (labels, base model, steps), before it is launched; with
    `estimate`, a PPO/GRPO/RLOO run's time estimate too (a micro-step measured in a fresh process)."""
    with ctx.connection() as db:
        stage_name, settings = form.settings(data, db, ctx.project)
        return run_preview.preview_run(db, ctx.project, stage_name, settings, estimate_time=estimate).markdown()


def refuse_unless_admin(ctx: UIContext, request: gr.Request) -> None:
    """A streamed handler's role check, before its first answer (@requires cannot wrap a generator)."""
    try:
        check_role(ctx, request, "admin")
    except PermissionDenied as error:
        raise gr.Error(f"Not allowed: {error}", title="Permission denied") from error


READING = "⏳ Reading the labels and prompts this run would use"
MEASURING = "⏳ Measuring a training micro-step for the time estimate, in a fresh process"


def preview_streamed(ctx: UIContext, form: LaunchForm, data: dict, request: gr.Request):
    """The preview button: said at once, the data part as soon as it is read, then the time estimate (PPO, GRPO,
    RLOO) with the seconds it has taken so far (waiting.in_background)."""
    refuse_unless_admin(ctx, request)
    yield READING + "…"
    quick = yield from waiting.in_background(lambda: preview_run(ctx, form, data, request, estimate=False), READING)
    if data[form.stage] not in run_preview.ESTIMATED_STAGES or "the run would stop at once" in quick:
        yield quick
        return
    yield f"{quick}  \n{MEASURING}…"
    yield (yield from waiting.in_background(lambda: preview_run(ctx, form, data, request), MEASURING,
                                            lambda text: f"{quick}  \n{text}"))


@ui_errors
@requires("admin")
def launch_run(ctx: UIContext, form: LaunchForm, data: dict, request: gr.Request) -> tuple:
    """Queue a run with the form's settings (jobs.create_run, the web allowlist); (notice, the run picker
    showing it)."""
    with ctx.connection() as db:
        stage_name, settings = form.settings(data, db, ctx.project)
        # A time budget becomes the steps that fit it, as the preview said (the CLI's train does the same).
        settings, _ = run_preview.apply_time_budget(db, ctx.project, stage_name, settings)
        # A run that would stop at once for want of data is refused, with the preview's reason (after the web
        # allowlist's own refusals: check runs just before the run would be stored).
        created = jobs.create_run(db, stage_name, settings, project=ctx.project, username=ctx.username(request),
                                  runs_dir=ctx.settings.runs_dir, from_web=True,
                                  check=lambda: run_preview.refuse_without_data(db, ctx.project, stage_name, settings))
        choices = run_choices(db, ctx.project)
    where = "started" if created.status == "running" else "queued (another run is in progress)"
    return f"Run **#{created.id}** {where}.", gr.update(choices=choices, value=created.id)


LAUNCHING = "⏳ Launching: checking the settings and the data, then queueing the run"


def launch_streamed(ctx: UIContext, form: LaunchForm, data: dict, request: gr.Request):
    """The Launch button: "Launching" at once (it took 35-122 s to say anything on a loaded machine), the seconds
    so far while launch_run checks and queues, then its notice. A refusal empties the notice and shows its toast."""
    refuse_unless_admin(ctx, request)
    yield LAUNCHING + "…", gr.skip()
    try:
        yield (yield from waiting.in_background(lambda: launch_run(ctx, form, data, request), LAUNCHING,
                                                lambda text: (text, gr.skip())))
    except gr.Error:
        yield "", gr.skip()
        raise


def wire(ctx: UIContext, form: LaunchForm, launch: gr.Button, preview: gr.Button, notice: gr.Markdown,
         run: gr.Dropdown) -> None:
    """The form's events: a stage shows its fields; Launch queues a run (picked in the monitor's `run`)."""
    refreshed = [form.stage, form.job_widgets["reward"], form.model, form.advanced]
    form.stage.change(show_stage, form.stage, [form.model, form.reward_group, *form.section_groups.values(),
                                               form.stage_note, *form.stage_groups.values(), form.judge_group],
                      api_name=False).then(
        bind(refresh_values, ctx, form), refreshed, form.refreshed_outputs, api_name=False).then(
        bind(refresh_judges, ctx), None, form.judge, api_name=False)
    if ctx.app is not None:  # on page load too (a project switch reloads the page): the judges of this registry
        ctx.app.load(bind(load_judges, ctx), None, form.judge, api_name=False)
    form.job_widgets["reward"].change(bind(refresh_values, ctx, form), refreshed, form.refreshed_outputs,
                                      api_name=False)
    launch.click(bind(launch_streamed, ctx, form), form.inputs, [notice, run], api_name="train_launch")
    preview.click(bind(preview_streamed, ctx, form), form.inputs, notice, api_name="train_preview")
