"""The Data tab's "2. Generate answers": a model's answers to the project's prompts, queued for rating and ranking.

The generating model stays loaded between clicks, in the server's one ModelCache (ctx.models, shared with Chat and
Arena within its memory budget), never a module global.
"""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler import forms
from labeler.services.serving import answer_length, generation, models
from labeler.services.serving.chat import ModelCache
from labeler.errors import InputError
from labeler.services.data.projects import get_project
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.data.summary import data_summary
from rlhf.configs import GenerationSettings

SETTING = ["studio-setting"]  # the Train form's class: a minimum width in a row
TARGET_ALL = "all without enough answers"
TARGET_LAST_IMPORT = "the last import batch"


@dataclass(frozen=True)
class GeneratePart:
    model: gr.Dropdown
    n_per_prompt: gr.Number
    limit: gr.Number  # prompts at most (0: all that need answers)
    target: gr.Radio  # TARGET_ALL or TARGET_LAST_IMPORT
    specs: list[forms.FieldSpec]  # GenerationSettings' fields, one widget each
    settings: list[gr.components.Component]
    button: gr.Button
    status: gr.Markdown
    length_note: gr.Markdown  # the project's answer length and where it came from
    refit: gr.Button  # the answer length fitted again from the picked model's answers

    @property
    def inputs(self) -> set:
        return {self.model, self.n_per_prompt, self.limit, self.target, *self.settings}

    @property
    def answer_tokens(self) -> gr.components.Component:
        """The max_new_tokens widget: set to the project's answer length when the tab loads."""
        return self.settings[[spec.name for spec in self.specs].index("max_new_tokens")]


def answer_tokens_value(db, project: str) -> int:
    return get_project(db, project).answer_tokens


def answer_length_note(db, project: str) -> str:
    """The project's answer length and where it came from (fitted from the base model's answers, set by hand, the
    format's default), under the Generate button."""
    current = get_project(db, project)
    return f"Answer length: **{current.answer_tokens} tokens**, {current.answer_length_origin}."


# The line under the answer length: its value is the project's (read again when the tab loads), not the class's.
PROJECT_LENGTH = "The project's answer length (Admin > Project settings)"


def project_start(ctx: UIContext, spec: forms.FieldSpec) -> dict:
    """The answer length widget starts at the project's answer length, marked as the project's."""
    if spec.name != "max_new_tokens":
        return {}
    with ctx.connection() as db:
        return {"value": answer_tokens_value(db, ctx.project), "info": f"{PROJECT_LENGTH}. {spec.help}"}


def build_generate(ctx: UIContext) -> GeneratePart:
    gen_specs = forms.field_specs(GenerationSettings)
    with gr.Accordion("2. Generate answers", open=True):
        with gr.Row():
            model = gr.Dropdown(
                choices=[ctx.settings.model], value=ctx.settings.model, allow_custom_value=True,
                label="Model", info="A registered model, 'default', or a local safetensors folder",
            )
            n_per_prompt = gr.Number(value=2, precision=0, minimum=1, maximum=8, label="Answers per prompt")
            limit = gr.Number(value=0, precision=0, minimum=0, label="Prompts (0 = all that need answers)")
            target = gr.Radio(
                [TARGET_ALL, TARGET_LAST_IMPORT], value=TARGET_ALL, label="Which prompts",
                info="Prompts with fewer answers than asked from this model; or only those of the latest upload",
                elem_id="data-generate-target",
            )
        with gr.Accordion("Sampling settings", open=False):
            with gr.Row():
                # A minimum width each (studio.css): in one row of nine, the Sample checkbox was squeezed to 18 px,
                # its label one letter a line.
                gen_widgets = [forms.widget(spec, elem_classes=SETTING, **project_start(ctx, spec))
                               for spec in gen_specs]
        generate_button = gr.Button("Generate responses", variant="primary", elem_id="data-generate")
        generate_status = gr.Markdown()
        with gr.Row(equal_height=True):
            length_note = gr.Markdown(elem_id="data-answer-length")
            refit = gr.Button("Refit the answer length", size="sm", scale=0, min_width=220,
                              elem_id="data-refit-length")
        gr.Markdown(f"**Refit** lets the picked model answer {answer_length.FIT_SAMPLE} of the training prompts (up "
                    f"to {answer_length.FIT_CAP} tokens) and sets the length within which "
                    f"{answer_length.FIT_SHARE:.0%} of them end on their own; a chat project's first import does "
                    "it by itself. Admin > Project settings sets it by hand.", elem_classes=["studio-note"])
    return GeneratePart(model, n_per_prompt, limit, target, gen_specs, gen_widgets, generate_button, generate_status,
                        length_note, refit)


def model_choices(ctx: UIContext, db) -> list[str]:
    """The models the picker offers: the registered chat models, and the server's own model first if it is not
    one of them."""
    names = models.chat_model_names(db)
    return names if ctx.settings.model in names else [ctx.settings.model, *names]


@keep_on_error(2, labels=forms.READABLE_LABELS)  # its sampling widgets' words (batch_size: "Prompts per batch")
@requires("admin")
def generate_answers(ctx: UIContext, part: GeneratePart, cache: ModelCache, values: dict, request: gr.Request,
                     progress=gr.Progress()) -> tuple:
    """Answers from the picked model for the prompts that need them (or the last import's); (status, summary)."""
    # Inputs given as a set arrive as {component: value}: the form's length can grow with the dataclass.
    model_name, n, limit_value = values[part.model], values[part.n_per_prompt], values[part.limit]
    with ctx.connection() as db:
        raw = forms.from_widgets(part.specs, [values[w] for w in part.settings])
        settings = forms.build_config(GenerationSettings, raw)
        within = None
        if values[part.target] == TARGET_LAST_IMPORT:
            within = generation.last_import_prompt_ids(db, ctx.project)
            if not within:
                raise InputError("the project has no imported prompts yet", field="which prompts")
        progress(0, desc="Loading the model (kept loaded for the next run)")

        def report(done: int, total: int) -> None:
            batches = -(-total // settings.batch_size)
            batch = min(batches, done // settings.batch_size + 1)
            desc = (f"Generating batch {batch} of {batches}" if done < total else "Queueing the last answers")
            progress(done / total, desc=f"{desc} ({done} of {total} answers done)")

        ids = generation.generate_responses(
            db, ctx.project, model=(model_name or ctx.settings.model).strip(), n_per_prompt=int(n or 1),
            settings=settings, limit=int(limit_value) if limit_value else None, progress=report,
            within_prompt_ids=within, loader=cache.get,
        )
        scope = f" for the last import batch ({len(within)} prompts)" if within is not None else ""
        message = f"Generated **{len(ids)}** answers{scope}; they are in the Rate and Rank queues now."
        if not ids:
            message = f"Nothing to generate{scope}: every prompt already has that many answers from this model."
        return message, data_summary(db, ctx.project)


def _fit(ctx: UIContext, db, model_name: str | None, cache: ModelCache, refit: bool) -> None:
    """The project's answer length fitted from `model_name`'s answers (the server's model when none): always when
    `refit`, else only while a chat project's length is the default (answer_length.fit_new_project). What happened
    is said: a fit as news, a fit that could not run as a warning (the length stays)."""
    name = (model_name or ctx.settings.model).strip()

    def load():
        return cache.get(models.resolve(db, name))

    outcome = answer_length.fit_new_project(db, ctx.project, load, refit=refit, sample=answer_length.FIT_SAMPLE,
                                            cap=answer_length.FIT_CAP if refit else answer_length.AUTO_FIT_CAP)
    if outcome.fitted is not None:
        gr.Info(outcome.message)
    elif outcome.message:
        gr.Warning(outcome.message)


@keep_on_error(3)
@requires("admin")
def fit_after_import(ctx: UIContext, part: GeneratePart, cache: ModelCache, values: dict, request: gr.Request,
                     progress=gr.Progress()) -> tuple:
    """After a prompt import: a chat project whose answer length is still the default gets it fitted from the
    picked model's answers (never fatal: a model that does not load keeps the default, and says so); any other
    project is left as it is. (note, the answer length widget, summary)."""
    with ctx.connection() as db:
        if answer_length.needs_fit(get_project(db, ctx.project)):
            progress(0, desc="Fitting the answer length to the model's own answers")
            _fit(ctx, db, values[part.model], cache, refit=False)
        return (answer_length_note(db, ctx.project), answer_tokens_value(db, ctx.project),
                data_summary(db, ctx.project))


@keep_on_error(3)
@requires("admin")
def refit_length(ctx: UIContext, part: GeneratePart, cache: ModelCache, values: dict, request: gr.Request,
                 progress=gr.Progress()) -> tuple:
    """The Refit button: the answer length fitted again from the picked model's answers, whatever it was; what
    stops it (no training prompts, a model that does not load) is said and changes nothing. (note, widget,
    summary)."""
    with ctx.connection() as db:
        progress(0, desc="Fitting the answer length to the model's own answers")
        _fit(ctx, db, values[part.model], cache, refit=True)
        return (answer_length_note(db, ctx.project), answer_tokens_value(db, ctx.project),
                data_summary(db, ctx.project))


def wire(ctx: UIContext, part: GeneratePart, summary: gr.Markdown) -> None:
    part.button.click(bind(generate_answers, ctx, part, ctx.models), part.inputs, [part.status, summary],
                      api_name="data_generate", trigger_mode="once", concurrency_limit=1)
    part.refit.click(bind(refit_length, ctx, part, ctx.models), {part.model},
                     [part.length_note, part.answer_tokens, summary], api_name="data_refit_length",
                     trigger_mode="once", concurrency_limit=1)


def wire_after_import(ctx: UIContext, part: GeneratePart, imported, summary: gr.Markdown) -> None:
    """`imported` (the prompt import's click event) followed by the fit of a new chat project's answer length: a
    step of its own, so the import's answer comes first and the fit's progress shows beside the length."""
    imported.then(bind(fit_after_import, ctx, part, ctx.models), {part.model},
                  [part.length_note, part.answer_tokens, summary], api_name="data_fit_length_after_import",
                  concurrency_limit=1)
