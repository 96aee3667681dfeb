"""The Admin tab's "Project settings": the Likert scale, the overlap, the prompt format, the queue order and the
guidelines annotators see."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services import measures, projects
from labeler.services.errors import InputError
from labeler.services.projects import MAX_ANSWER_TOKENS, PROMPT_FORMATS, SELECTIONS
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.admin.snapshot import SHOWN, snapshot


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
                info="module:function from the command line: rlhf-studio projects set --measure",
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
    return ProjectPart(likert_min, likert_max, overlap, prompt_format, selection, answer_tokens, measure, guidelines,
                       ranking_guidelines, save_project)


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
