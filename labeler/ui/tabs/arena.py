"""Arena tab: one prompt, two anonymous answers (A and B), a vote, then the names; and the leaderboard.

The gr.State holds the battle id only. Which model is A is decided by the arena service with a fresh
random generator per battle; the names reach the browser only in the vote's answer. The handlers are module
functions taking the UIContext and the tab's caches (ArenaCaches) first, bound to their events in `build`. The two
models come from the server's one ModelCache (ctx.models), which keeps a person to one answer at a time across
Chat, Arena and best-of-N and queues answers beyond the server's cap.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import gradio as gr

from labeler.services.serving import arena
from labeler.services.data.projects import get_project
from labeler.errors import InputError
from labeler.services.serving.leaderboard import MIN_VOTES_FOR_INTERVAL, LeaderboardCache, leaderboard
from labeler.ui.binding import bind
from labeler.ui.context import GENERATING_EVENTS, UIContext
from labeler.ui.model_choices import model_choices
from labeler.ui.roles import requires
from labeler.ui.session import quiet_before_password_change
from labeler.ui.soft_errors import ui_errors

TITLE = "Arena"
RANDOM = "(random)"
LEADERBOARD_HEADERS = ["model", "bt_score", "ci_low", "ci_high", "elo", "votes"]
# What the table's columns are called on screen (LEADERBOARD_HEADERS are leaderboard()'s keys).
LEADERBOARD_TITLES = ["Model", "Score", "Lowest likely", "Highest likely", "Elo", "Votes"]
HOW = (
    "Type a prompt (or draw one from the project), press **Battle**: two models answer, shown as **A** and **B** "
    "in random order. Vote, and the names are revealed. Each vote is stored as a ranking, so it trains reward "
    "models and DPO like any other label; the leaderboard fits a Bradley-Terry model to all votes."
)
# The vote buttons: (winner sent to arena.vote, button text, what the reveal says was voted).
VOTES = (("a", "👈 A is better", "you preferred **A**"), ("b", "👉 B is better", "you preferred **B**"),
         ("tie", "🤝 Tie", "a **tie**"), ("both_bad", "👎 Both bad", "**both bad**"))
IDENTICAL = "⚠️ **The two answers are identical**: there is nothing to prefer, so **Tie** is the honest vote."
NO_INTERVAL = "n/a"


def leaderboard_table(db, project: str, cache=None) -> list[list]:
    # A missing interval (too few votes) is shown as n/a, not as an empty cell that looks like a bug.
    rows = leaderboard(db, project, cache=cache)
    return [[NO_INTERVAL if row[h] is None else row[h] for h in LEADERBOARD_HEADERS] for row in rows]


def leaderboard_note() -> str:
    return (f"Score: Bradley-Terry strength on the Elo scale; lowest and highest likely: its 95% bootstrap "
            f"interval, shown once a model has {MIN_VOTES_FOR_INTERVAL} votes (n/a before).")


@dataclass(frozen=True)
class ArenaCaches:
    """What the tab keeps between requests: the leaderboard (page loads reuse the board, votes the bootstrap: see
    LeaderboardCache). The models are the server's (ctx.models)."""
    board: LeaderboardCache


def not_ready_updates(reason: str | None) -> tuple[dict, dict]:
    """The not-ready note and the Battle button: fewer than two models, say why and how to get a second one,
    and leave Battle off instead of an error."""
    return gr.update(value=f"ℹ️ {reason}" if reason else "", visible=bool(reason)), gr.update(interactive=reason is None)


@ui_errors
@requires("user")
def load(ctx: UIContext, caches: ArenaCaches, request: gr.Request) -> tuple:
    """The page load: both model pickers (random picked), the leaderboard, the not-ready note, Battle, and the
    answer length (the project's, within the slider's range)."""
    with ctx.connection() as db:
        names, _ = model_choices(ctx, db)
        reason = arena.not_ready_reason(db, (ctx.settings.model,))
        table = leaderboard_table(db, ctx.project, caches.board)
        tokens = get_project(db, ctx.project).answer_tokens
    choices = [RANDOM, *names]
    return (gr.update(choices=choices, value=RANDOM), gr.update(choices=choices, value=RANDOM), table,
            *not_ready_updates(reason), min(512, max(8, round(tokens / 8) * 8)))


@ui_errors
@requires("user")
def random_prompt(ctx: UIContext, request: gr.Request) -> str:
    with ctx.connection() as db:
        return arena.random_prompt(db, ctx.project, random.Random())


@ui_errors
@requires("user")
def start_battle(ctx: UIContext, caches: ArenaCaches, prompt_text, first, second, tokens, request: gr.Request) -> tuple:
    """Two models' answers to `prompt_text`, shown as A and B in random order; `first`/`second` RANDOM (or
    blank): drawn from the registered models. Outputs: both answers, the reveal emptied, the identical-answers
    note, the battle's state, the vote buttons on."""
    with ctx.connection() as db:
        names, _ = model_choices(ctx, db)
        reason = arena.not_ready_reason(db, (ctx.settings.model,))
        if reason:  # the button is off, but the endpoint can be called directly
            raise InputError(reason, field="model")
        rng = random.Random()  # fresh entropy per battle: the A/B order must not be guessable
        chosen = []
        for picked in (first, second):
            if not picked or picked == RANDOM:
                pool = [n for n in names if n not in chosen and n not in (first, second)]
                if not pool:
                    raise InputError("register at least two models to battle", field="model")
                picked = rng.choice(pool)
            chosen.append(picked)
        settings = dataclasses.replace(arena.ARENA_SETTINGS, max_new_tokens=int(tokens))
        battle = arena.start_battle(
            db, ctx.models, ctx.project, ctx.username(request), prompt_text, *chosen, settings, rng,
            server_models=(ctx.settings.model,), budget_s=ctx.settings.chat_budget_s, notify=gr.Warning,
        )
    buttons = [gr.update(interactive=True) for _ in VOTES]
    return (
        battle.answer_a or "*(empty answer)*", battle.answer_b or "*(empty answer)*", "",
        IDENTICAL if battle.identical else "", {"battle_id": battle.id}, *buttons,
    )


@ui_errors
@requires("user")
def vote(ctx: UIContext, caches: ArenaCaches, winner: str, current, request: gr.Request) -> tuple:
    """The vote `winner` (a VOTES key) on the battle in `current`, stored as a ranking; the names revealed.
    Outputs: the reveal, the identical-answers note emptied, the state cleared, the leaderboard, the buttons off."""
    if not current:
        raise InputError("start a battle first", field="battle_id")
    with ctx.connection() as db:
        result = arena.vote(db, int(current["battle_id"]), ctx.username(request), winner)
        table = leaderboard_table(db, ctx.project, caches.board)
    verdict = {key: said for key, _, said in VOTES}[winner]
    text = f"**A** was `{result.model_a}`, **B** was `{result.model_b}`: {verdict}. Thanks, your vote is stored."
    buttons = [gr.update(interactive=False) for _ in VOTES]
    return (text, "", None, table, *buttons)


@ui_errors
@requires("user")
def show_leaderboard(ctx: UIContext, caches: ArenaCaches, request: gr.Request) -> list[list]:
    with ctx.connection() as db:
        return leaderboard_table(db, ctx.project, caches.board)


@ui_errors
@requires("user")
def reload_models(ctx: UIContext, request: gr.Request) -> tuple:
    """The model lists and the not-ready note read again; the picked models stay picked."""
    with ctx.connection() as db:
        names, _ = model_choices(ctx, db)
        reason = arena.not_ready_reason(db, (ctx.settings.model,))
    return (gr.update(choices=[RANDOM, *names]), gr.update(choices=[RANDOM, *names]), *not_ready_updates(reason))


def build(ctx: UIContext):
    caches = ArenaCaches(LeaderboardCache())
    battle_state = gr.State(None)

    gr.Markdown(HOW)
    not_ready = gr.Markdown(visible=False, elem_id="arena-not-ready")
    # Blind by default: both models drawn at random, so no name is on screen before the vote. Picking them is
    # possible, behind a closed accordion that says what it gives away (the A/B order stays random).
    with gr.Accordion("Pick the two models yourself (you then know which two are battling)", open=False):
        with gr.Row():
            # The arena service accepts registered chat models only (see the Chat tab's model dropdown for why
            # the widget itself still takes any value).
            model_1 = gr.Dropdown(choices=[RANDOM], value=RANDOM, label="Model 1", allow_custom_value=True,
                                  elem_id="arena-model-1")
            model_2 = gr.Dropdown(choices=[RANDOM], value=RANDOM, label="Model 2", allow_custom_value=True,
                                  elem_id="arena-model-2")
            max_new_tokens = gr.Slider(8, 512, value=arena.ARENA_SETTINGS.max_new_tokens, step=8,
                                       label="Answer length (new tokens)", elem_id="arena-max-new-tokens")
    with gr.Row():
        prompt = gr.Textbox(label="Prompt", lines=2, scale=5, elem_id="arena-prompt")
        with gr.Column(scale=1, min_width=140):
            draw = gr.Button("🎲 Random prompt", elem_id="arena-random-prompt")
            start = gr.Button("Battle", variant="primary", elem_id="arena-start")
    with gr.Row(equal_height=False):
        with gr.Column():
            gr.Markdown("### Answer A")
            answer_a = gr.Markdown(container=True, elem_id="arena-answer-a", elem_classes=["studio-response"])
        with gr.Column():
            gr.Markdown("### Answer B")
            answer_b = gr.Markdown(container=True, elem_id="arena-answer-b", elem_classes=["studio-response"])
    with gr.Row():
        vote_buttons = [gr.Button(text, interactive=False, elem_id=f"arena-vote-{key.replace('_', '-')}")
                        for key, text, _ in VOTES]
    identical = gr.Markdown(elem_id="arena-identical")
    reveal = gr.Markdown(elem_id="arena-reveal")
    with gr.Accordion("Leaderboard", open=True):
        board = gr.Dataframe(headers=LEADERBOARD_TITLES, interactive=False, elem_id="arena-leaderboard")
        gr.Markdown(leaderboard_note())
        refresh_board = gr.Button("Refresh leaderboard", size="sm", elem_id="arena-refresh")

    if ctx.app is not None:
        ctx.app.load(quiet_before_password_change(bind(load, ctx, caches), 6), None,
                     [model_1, model_2, board, not_ready, start, max_new_tokens], api_name="arena_load")
    draw.click(bind(random_prompt, ctx), None, prompt, api_name="arena_random_prompt")
    start.click(
        bind(start_battle, ctx, caches), [prompt, model_1, model_2, max_new_tokens],
        [answer_a, answer_b, reveal, identical, battle_state, *vote_buttons],
        api_name="arena_start", **GENERATING_EVENTS,
    )
    for (winner, _, _), button in zip(VOTES, vote_buttons):
        button.click(bind(vote, ctx, caches, winner), [battle_state],
                     [reveal, identical, battle_state, board, *vote_buttons],
                     api_name=f"arena_vote_{winner}", trigger_mode="once")
    refresh_board.click(bind(show_leaderboard, ctx, caches), None, board, api_name="arena_leaderboard")

    def on_tab(tab: gr.Tab) -> None:
        # Opening the tab reads the registry again: a model registered or trained since the
        # page loaded is offered, and the "only one model" note goes, without a reload.
        tab.select(quiet_before_password_change(bind(reload_models, ctx), 4), None, [model_1, model_2, not_ready, start],
                   api_name="arena_models", show_progress="hidden")

    return on_tab
