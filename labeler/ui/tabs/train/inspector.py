"""The Train tab's reward-model inspector: a registered reward model's scores for answers typed side by side,
its agreement with people's rankings, and the distribution of its scores over the project's answers."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr
import pandas as pd

from labeler.services.evals import reward_inspect
from labeler.errors import InputError
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors


@dataclass(frozen=True)
class Inspector:
    model: gr.Dropdown  # the reward model inspected (filled on page load)
    prompt: gr.Textbox
    responses: gr.Textbox  # one answer per line
    score_button: gr.Button
    agree_button: gr.Button
    scores: gr.Dataframe
    agreement: gr.Markdown
    distribution: gr.BarPlot


def build_inspector() -> Inspector:
    with gr.Accordion("Inspect a reward model", open=False):
        model = gr.Dropdown([], value=None, label="Reward model", allow_custom_value=True)
        prompt = gr.Textbox(label="Prompt", value="I watched this film last night and")
        responses = gr.Textbox(label="Responses (one per line)", lines=3,
                               value="it was a wonderful, moving experience.\nit was a boring waste of time.")
        with gr.Row():
            score_button = gr.Button("Score side by side")
            agree_button = gr.Button("Agreement with human labels + score distribution")
        scores = gr.Dataframe(pd.DataFrame(columns=["response", "score"]), interactive=False, wrap=True)
        agreement = gr.Markdown()
        distribution = gr.BarPlot(pd.DataFrame({"score": [], "count": []}), x="score", y="count",
                                  label="Score distribution over the project's answers", height=240)
    return Inspector(model, prompt, responses, score_button, agree_button, scores, agreement, distribution)


def _scorer(db, name: str | None) -> reward_inspect.Scorer:
    if not name:
        raise InputError("pick a reward model", field="reward model")
    return reward_inspect.load_scorer(db, name)


@ui_errors
@requires("admin")
def score_answers(ctx: UIContext, name: str | None, prompt: str, responses_text: str | None,
                  request: gr.Request) -> pd.DataFrame:
    """Reward model `name`'s score of each line of `responses_text` as an answer to `prompt`."""
    with ctx.connection() as db:
        scorer = _scorer(db, name)
    rows = reward_inspect.score_side_by_side(scorer, prompt, (responses_text or "").splitlines())
    return pd.DataFrame(rows, columns=["response", "score"])


@ui_errors
@requires("admin")
def agreement_and_scores(ctx: UIContext, name: str | None, request: gr.Request) -> tuple[str, pd.DataFrame]:
    """How often reward model `name` agrees with people's rankings (held-out prompts where there is a split), and
    the histogram of its scores over the project's answers."""
    with ctx.connection() as db:
        scorer = _scorer(db, name)
        result = reward_inspect.agreement(db, scorer, ctx.project)
        scores = reward_inspect.score_distribution(db, scorer, ctx.project)
    where = "held-out prompts (split test)" if result["heldout"] else "all prompts (no held-out split: optimistic)"
    text = (f"**{result['pairs']}** human-ranked pairs on {where}: the reward model agrees on "
            f"**{result['accuracy']:.0%}**, mean margin {result['mean_margin']:.3f}."
            if result["pairs"] else "No ranked pairs to compare with yet.")
    histogram = reward_inspect.score_histogram([row["score"] for row in scores])
    return text, pd.DataFrame({"score": [f"{mid:.2f}" for mid, _ in histogram],
                               "count": [count for _, count in histogram]})


def wire(ctx: UIContext, inspector: Inspector) -> None:
    inspector.score_button.click(bind(score_answers, ctx), [inspector.model, inspector.prompt, inspector.responses],
                                 inspector.scores, api_name="reward_score")
    inspector.agree_button.click(bind(agreement_and_scores, ctx), inspector.model,
                                 [inspector.agreement, inspector.distribution], api_name="reward_agreement")
