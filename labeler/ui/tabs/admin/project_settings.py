"""The Admin tab's "Project settings": the Likert scale, the overlap, the prompt format, the queue order and the
guidelines annotators see; and "New project": a team's own project made in the browser (name, prompt format,
answer length, measure, held-out share), which the admin then works in (projects.choose_project)."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services.evals import measures
from labeler.services.data import projects
from labeler.errors import InputError, PermissionDenied
from labeler.services.data.projects import (DEFAULT_ANSWER_TOKENS, DEFAULT_HELDOUT_SHARE, MAX_ANSWER_TOKENS,
                                            PROMPT_FORMATS, SELECTIONS)
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.soft_errors import keep_on_error, ui_errors
from labeler.ui.tabs.admin.snapshot import MEASURE_INFO, SHOWN, measure_choices, snapshot

# The page is reloaded once the admin works in the new project: every tab reads it on load, as after a refresh.
RELOAD_JS = "(name) => { if (name) { window.location.reload(); } return name; }"


@dataclass(frozen=True)
class NewProjectPart:
    name: gr.Textbox
    prompt_format: gr.Dropdown
    answer_tokens: gr.Number
    measure: gr.Dropdown
    heldout_share: gr.Slider
    create: gr.Button
    created: gr.Textbox  # the new project's name, read by the page reload (hidden)

    @property
    def inputs(self) -> list:
        return [self.name, self.prompt_format, self.answer_tokens, self.measure, self.heldout_share]


@dataclass(frozen=True)
class ProjectPart:
    likert_min: gr.Number
    likert_max: gr.Number
    overlap: gr.Number
    prompt_format: gr.Dropdown
    selection: gr.Dropdown
    answer_tokens: gr.Number
    measure: gr.Dropdown
    guidelines: gr.Textbox  # for rating
    ranking_guidelines: gr.Textbox
    save: gr.Button
    new: NewProjectPart

    @property
    def inputs(self) -> list:
        return [self.likert_min, self.likert_max, self.overlap, self.guidelines, self.ranking_guidelines,
                self.prompt_format, self.selection, self.answer_tokens, self.measure]


def build_project_settings() -> ProjectPart:
    with gr.Accordion("Project settings", open=True):
        with gr.Row():
            likert_min = gr.Number(precision=0, label="Lowest score", elem_id="admin-likert-min")
            likert_max = gr.Number(precision=0, label="Highest score")
            overlap = gr.Number(precision=0, minimum=1, label="Annotators per item (overlap)")
            prompt_format = gr.Dropdown(
                choices=[(f"{name}: {text}", name) for name, text in PROMPT_FORMATS.items()],
                label="Prompt format (generation, training and evaluation)", elem_id="admin-prompt-format",
            )
            selection = gr.Dropdown(
                choices=[(f"{name}: {text}", name) for name, text in SELECTIONS.items()],
                label="Queue order (which item annotators get next)", elem_id="admin-selection",
            )
        with gr.Row():
            answer_tokens = gr.Number(
                precision=0, minimum=1, maximum=MAX_ANSWER_TOKENS, label="Answer length (tokens)",
                info="For generation, every policy run, evaluation, chat and the arena (a run may set its own)",
                elem_id="admin-answer-tokens",
            )
            measure = gr.Dropdown(
                choices=[], label="Measure (how finished runs are judged on the held-out prompts)",
                info=MEASURE_INFO,
                allow_custom_value=True, elem_id="admin-measure",
            )
        # The text annotators see, per label kind (projects.Project.guidelines_for): the default in full while
        # the project has none of its own, so what is here is what Rate and Rank show.
        with gr.Row():
            guidelines = gr.Textbox(
                label="Rating guidelines (Markdown, shown beside every item in Rate)", lines=8,
                info="Empty, or left as the default text: annotators see the default.", elem_id="admin-guidelines",
            )
            ranking_guidelines = gr.Textbox(
                label="Ranking guidelines (Markdown, shown beside every item in Rank)", lines=8,
                info="Empty, or left as the default text: annotators see the default.",
                elem_id="admin-ranking-guidelines",
            )
        save_project = gr.Button("Save settings", variant="primary", elem_id="admin-save-project")
    new = build_new_project()
    return ProjectPart(likert_min, likert_max, overlap, prompt_format, selection, answer_tokens, measure, guidelines,
                       ranking_guidelines, save_project, new)


def build_new_project() -> NewProjectPart:
    with gr.Accordion("New project", open=False, elem_id="admin-new-project"):
        gr.Markdown("A project of your own: its prompts, answers, labels, runs and settings are kept apart from the "
                    "others. Once made, you work in it; switch projects with the **Project** picker at the top.")
        with gr.Row():
            name = gr.Textbox(label="Name", placeholder="e.g. support-answers", elem_id="admin-new-project-name")
            prompt_format = gr.Dropdown(
                choices=[(f"{key}: {text}", key) for key, text in PROMPT_FORMATS.items()], value="chat",
                label="Prompt format", elem_id="admin-new-project-format",
            )
            answer_tokens = gr.Number(
                value=DEFAULT_ANSWER_TOKENS["chat"], precision=0, minimum=1, maximum=MAX_ANSWER_TOKENS,
                label="Answer length (tokens)",
                info=f"Blank: {DEFAULT_ANSWER_TOKENS['chat']} for chat, {DEFAULT_ANSWER_TOKENS['continue']} to continue "
                     "a text", elem_id="admin-new-project-tokens",
            )
        with gr.Row():
            measure = gr.Dropdown(choices=[(f"default: {measures.DEFAULT_WORDS}", "")], value="",
                                  label="Measure (how finished runs are judged)",
                                  elem_id="admin-new-project-measure")
            heldout_share = gr.Slider(0, 0.5, value=DEFAULT_HELDOUT_SHARE, step=0.05,
                                      label="Held-out share (prompts kept to evaluate runs on)",
                                      elem_id="admin-new-project-heldout")
        create = gr.Button("Create project and work in it", variant="primary", elem_id="admin-create-project")
        created = gr.Textbox(visible=False, elem_id="admin-new-project-created")
    return NewProjectPart(name, prompt_format, answer_tokens, measure, heldout_share, create, created)


@ui_errors
@requires("admin")
def create_project(ctx: UIContext, name, prompt_format_name, answer_tokens, measure, heldout_share,
                   request: gr.Request) -> str:
    """A new project with these settings, which the admin works in from now on; returns its name. The measure is
    checked before anything is made (a reward model's name, VADER or people: a module:function is set from the
    command line)."""
    name = (name or "").strip()
    if not name:
        raise InputError("type a name for the project", field="name")
    with ctx.connection() as db:
        measure = measures.check_measure(db, measure or "")
        if measure not in ("", measures.PEOPLE, "vader", "vader-with-prompt") and not measure.startswith("rm:"):
            raise InputError("a module:function measure is set from the command line (rlhf-studio projects set "
                             "--measure): it names code the server imports", field="measure")
        project = projects.create_project(
            db, name, prompt_format=prompt_format_name or "chat",
            answer_tokens=None if answer_tokens is None else int(answer_tokens),
            heldout_share=DEFAULT_HELDOUT_SHARE if heldout_share is None else float(heldout_share))
        if measure:
            projects.update_project(db, project.name, measure=measure)
        projects.choose_project(db, UIContext.username(request), project.name)
    gr.Info(f"Project {project.name} created: you work in it now.")
    return project.name


def new_project_choices(ctx: UIContext, request: gr.Request) -> dict:
    """The page load: the new-project form's measures (nothing for anyone but an admin, and no toast)."""
    try:
        check_role(ctx, request, "admin")
    except PermissionDenied:
        return gr.skip()
    with ctx.connection() as db:
        return gr.update(choices=measure_choices(db))



@keep_on_error(len(SHOWN))
@requires("admin")
def save_project(ctx: UIContext, low, high, k, text, ranking_text=None, prompt_format_name=None, selection_name=None,
                 answer_tokens=None, measure=None, request: gr.Request = None) -> tuple:
    """ranking_text, prompt_format_name, selection_name, answer_tokens or measure None (an API caller that sends
    the older fields): they stay. A measure is checked before anything is saved (measures.check_measure); from the
    web only a reward model, VADER or people (a module:function names code to import: command line only)."""
    with ctx.connection() as db:
        numbers = {"likert_min": low, "likert_max": high, "overlap": k}
        for field, value in numbers.items():
            if value is None:  # an emptied number box arrives as None
                raise InputError("enter a whole number", field=field)
        if measure is not None and measure != projects.get_project(db, ctx.project).measure:
            measure = measures.check_measure(db, measure)
            if measure not in ("", measures.PEOPLE, "vader", "vader-with-prompt") and not measure.startswith("rm:"):
                raise InputError("a module:function measure is set from the command line (rlhf-studio projects set "
                                 "--measure): it names code the server imports", field="measure")
        projects.update_project(db, ctx.project, **{f: int(v) for f, v in numbers.items()}, guidelines=text or "",
                                ranking_guidelines=ranking_text, prompt_format=prompt_format_name,
                                selection=selection_name, measure=measure,
                                answer_tokens=None if answer_tokens is None else int(answer_tokens))
        gr.Info("Project settings saved.")
        return snapshot(db, ctx.project)


def wire(ctx: UIContext, part: ProjectPart, shown: list) -> None:
    part.save.click(bind(save_project, ctx), part.inputs, shown, api_name="admin_save_project")
    new = part.new
    new.create.click(bind(create_project, ctx), new.inputs, [new.created], api_name="admin_create_project").success(
        None, [new.created], None, js=RELOAD_JS)
    # A chat project's answers need room; a continuation's do not (projects.DEFAULT_ANSWER_TOKENS).
    new.prompt_format.input(None, [new.prompt_format], [new.answer_tokens], js=ANSWER_TOKENS_JS)
    if ctx.app is not None:
        ctx.app.load(bind(new_project_choices, ctx), None, [new.measure],
                     api_name="admin_new_project_choices", show_progress="hidden")


# In the browser alone: the format's default length (nothing to check on the server).
ANSWER_TOKENS_JS = (f"(format) => format === 'continue' ? {DEFAULT_ANSWER_TOKENS['continue']} "
                    f": {DEFAULT_ANSWER_TOKENS['chat']}")
