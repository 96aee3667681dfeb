"""The Admin tab's "Project settings": the Likert scale, the overlap, the prompt format, the queue order and the
guidelines annotators see."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services import projects
from labeler.services.errors import InputError
from labeler.services.projects import PROMPT_FORMATS, SELECTIONS
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
    guidelines: gr.Textbox  # for rating
    ranking_guidelines: gr.Textbox
    save: gr.Button

    @property
    def inputs(self) -> list:
        return [self.likert_min, self.likert_max, self.overlap, self.guidelines, self.ranking_guidelines,
                self.prompt_format, self.selection]


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
    return ProjectPart(likert_min, likert_max, overlap, prompt_format, selection, guidelines, ranking_guidelines,
                       save_project)


@keep_on_error(len(SHOWN))
@requires("admin")
def save_project(ctx: UIContext, low, high, k, text, ranking_text=None, prompt_format_name=None, selection_name=None,
                 request: gr.Request = None) -> tuple:
    """ranking_text, prompt_format_name or selection_name None (an API caller that sends the older fields):
    they stay."""
    with ctx.connection() as db:
        numbers = {"likert_min": low, "likert_max": high, "overlap": k}
        for field, value in numbers.items():
            if value is None:  # an emptied number box arrives as None
                raise InputError("enter a whole number", field=field)
        projects.update_project(db, ctx.project, **{f: int(v) for f, v in numbers.items()}, guidelines=text or "",
                                ranking_guidelines=ranking_text, prompt_format=prompt_format_name,
                                selection=selection_name)
        gr.Info("Project settings saved.")
        return snapshot(db, ctx.project)


def wire(ctx: UIContext, part: ProjectPart, shown: list) -> None:
    part.save.click(bind(save_project, ctx), part.inputs, shown, api_name="admin_save_project")
