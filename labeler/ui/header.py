"""What sits above the tabs: the title row saying who is logged in and which project they work in (a picker: each
person's own choice, kept in SQLite, projects.choose_project), the first-login password panel and the admin's
first-steps panel.

As in the tabs, the handlers are named functions taking the UIContext first (bound to their events with
binding.bind), so a test calls them directly: `whoami`, `project_picker`, `switch_project`, `first_steps`,
`first_steps_tick`, `change_own_password`.
"""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services.data import accounts, projects
from labeler.errors import InputError, PermissionDenied
from labeler.services.data.projects import project_counts
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.session import LOGOUT_JS, login_throttle
from labeler.ui.soft_errors import ui_errors  # a wrong entry: one log line, not a traceback

FIRST_STEPS_REFRESH_S = 5.0  # seconds between the first-steps panel's re-reads while it is shown


@dataclass(frozen=True)
class TitleRow:
    whoami: gr.Markdown  # "Logged in as ...", filled on page load
    project: gr.Dropdown  # the project this person works in; a change reloads the page in the new one
    logout: gr.Button


@dataclass(frozen=True)
class PasswordPanel:
    """Shown instead of the tabs to a user whose password is the one-time one `serve` printed."""
    panel: gr.Column
    current: gr.Textbox
    new: gr.Textbox
    repeat: gr.Textbox
    change: gr.Button
    status: gr.Markdown


def build_title_row() -> TitleRow:
    with gr.Row(equal_height=True):
        gr.Markdown("# RLHF Studio", elem_id="studio-title")
        whoami_text = gr.Markdown(elem_id="studio-whoami")
        project = gr.Dropdown(choices=[], label="Project", scale=0, min_width=220, interactive=True,
                              elem_id="studio-project")
        logout = gr.Button("Log out", size="sm", scale=0, min_width=100, elem_id="studio-logout")
    return TitleRow(whoami_text, project, logout)


def build_password_panel() -> PasswordPanel:
    with gr.Column(visible=False, elem_id="studio-password-panel") as panel:
        gr.Markdown(
            "### Choose your own password\nYou logged in with the one-time password printed by `rlhf-studio serve`. "
            f"Replace it to continue ({accounts.MIN_PASSWORD_LENGTH}+ characters); then log in again with the new one."
        )
        with gr.Row():
            current = gr.Textbox(label="One-time password", type="password", elem_id="studio-current-password")
            new = gr.Textbox(label="New password", type="password", elem_id="studio-new-password")
            repeat = gr.Textbox(label="Repeat new password", type="password", elem_id="studio-repeat-password")
        change = gr.Button("Set my password", variant="primary", elem_id="studio-change-password")
        status = gr.Markdown(elem_id="studio-password-status")
    return PasswordPanel(panel, current, new, repeat, change, status)


def build_first_steps() -> gr.Markdown:
    return gr.Markdown(visible=False, elem_id="studio-first-steps", elem_classes=["studio-banner"])


def first_steps_markdown(counts: dict[str, int], project: str, prompt_format: str = "continue") -> str:
    """The admin's "what to do first" on a project without prompts or labels; done steps are ticked. The shipped
    movie-review openings are suggested only to a project whose prompts are continued (`continue`): a chat
    project's team brings its own questions."""

    def step(done: bool, text: str) -> str:
        return f"- {'✅' if done else '⬜'} {text}"

    labels = counts["ratings"] + counts["rankings"]
    return "\n".join([
        f"### First steps for project **{project}**",
        step(counts["prompts"] > 0,
             f"**Import prompts**: **Data > 1. Prompts**, upload a file"
             + (" or import the shipped movie-review prompts" if prompt_format == "continue"
                else " of your questions (CSV, JSONL, .txt one per line)")
             + f" ({counts['prompts']} so far)."),
        step(counts["responses"] > 0, f"**Generate answers**: **Data > 2. Generate answers** with a model "
                                      f"({counts['responses']} so far). Add annotators in **Admin > Users**."),
        step(labels > 0, f"**Rate and rank**: the **Rate** and **Rank** tabs, from the keyboard ({labels} labels "
                         "so far)."),
        step(False, "**Train**: a reward model, then DPO or PPO, in the **Train** tab (or export a dataset in "
                    "**Data > 3. Export**)."),
        "",
        "This panel goes away once the project has prompts and labels.",
    ])


def whoami(ctx: UIContext, n_admin_tabs: int, request: gr.Request) -> tuple:
    """The page load: who is logged in, and which of the password panel, the tabs and the admin tabs show."""
    with ctx.connection() as db:
        user = accounts.get_user(db, getattr(request, "username", None) or "")
        project = ctx.project_of(db, user.username) if user is not None else ""
    if user is None:
        return ("", gr.update(visible=False), gr.update(), *[gr.update(visible=False) for _ in range(n_admin_tabs)])
    is_admin = user.role == "admin"
    text = f"Logged in as **{user.username}** ({user.role}) · project **{project}**"
    # A one-time password: only the panel to replace it (the server refuses everything else anyway).
    first_login = user.must_change_password
    return (
        text, gr.update(visible=first_login), gr.update(visible=not first_login),
        *[gr.update(visible=is_admin) for _ in range(n_admin_tabs)],
    )


def first_steps(ctx: UIContext, request: gr.Request) -> dict:
    """An admin on a project without prompts or labels: what to do first (hidden for anyone else)."""
    with ctx.connection() as db:
        user = accounts.get_user(db, getattr(request, "username", None) or "")
        if user is None or user.role != "admin":
            return gr.update(visible=False)
        project = ctx.project_of(db, user.username)
        counts = project_counts(db, project)
        prompt_format = projects.get_project(db, project).prompt_format
    if counts["prompts"] and counts["ratings"] + counts["rankings"]:
        return gr.update(visible=False)
    return gr.update(value=first_steps_markdown(counts, project, prompt_format), visible=True)


def first_steps_tick(ctx: UIContext, request: gr.Request) -> tuple:
    """The first-steps panel and its timer, which runs only while the panel is shown."""
    shown = first_steps(ctx, request)
    return shown, gr.Timer(active=bool(shown.get("visible")))


def project_picker(ctx: UIContext, request: gr.Request) -> dict:
    """The page load: every project, this person's own selected (nothing for a refused caller: a page load of
    someone who must first replace a one-time password shows no toast)."""
    try:
        check_role(ctx, request, "user")
    except PermissionDenied:
        return gr.skip()
    with ctx.connection() as db:
        names = [project.name for project in projects.list_projects(db)]
    return gr.update(choices=names, value=ctx.project)


@ui_errors
@requires("user")
def switch_project(ctx: UIContext, name: str | None, request: gr.Request) -> str:
    """This person works in `name` from now on (their other tabs and windows too, after a reload); returns it."""
    if not name:
        raise InputError("choose a project", field="project")
    with ctx.connection() as db:
        if name == ctx.project:
            return name
        projects.choose_project(db, UIContext.username(request), name)
    return name


# The page is reloaded after a switch: every tab reads the new project on load, as after a refresh.
RELOAD_JS = "(name) => { if (name) { window.location.reload(); } return name; }"


# ui_errors (a red toast, the event fails): the .success that logs out must not run after a refusal.
@ui_errors
def change_own_password(ctx: UIContext, current_value, new_value, repeat_value, request: gr.Request) -> str:
    """The first-login panel's button: the one-time password replaced by the user's own."""
    throttle, address = login_throttle(request)  # wrong current passwords count like wrong logins
    with ctx.connection() as db:
        accounts.change_own_password(db, UIContext.username(request), current_value, new_value, repeat_value,
                                     throttle=throttle, address=address)
    return "Password changed. Log in again with the new password."


def wire_password_panel(ctx: UIContext, part: PasswordPanel) -> None:
    # The change ends this browser's session (the session epoch moved on): back to the login page.
    part.change.click(bind(change_own_password, ctx), [part.current, part.new, part.repeat], [part.status],
                      api_name="change_own_password").success(
        None, None, None, js=f"() => {{ setTimeout({LOGOUT_JS}, 1500); }}",
        api_name="change_own_password_done",
    )


def wire_page_load(ctx: UIContext, title: TitleRow, password: PasswordPanel, main: gr.Column,
                   first_steps_panel: gr.Markdown, admin_tabs: list[gr.Tab]) -> None:
    """The page load's who-is-logged-in (which of the panel, the tabs and the admin tabs show) and first steps."""
    if ctx.app is None:
        raise TypeError("wire_page_load needs the Blocks being built: a UIContext with app=")
    ctx.app.load(bind(whoami, ctx, len(admin_tabs)), None, [title.whoami, password.panel, main, *admin_tabs],
                 api_name="whoami")
    ctx.app.load(bind(project_picker, ctx), None, [title.project], api_name="project_picker", show_progress="hidden")
    # .input, not .change: the page load's own filling of the picker must not switch anything.
    title.project.input(bind(switch_project, ctx), [title.project], [title.project], api_name="switch_project").success(
        None, [title.project], None, js=RELOAD_JS)
    ctx.app.load(bind(first_steps, ctx), None, [first_steps_panel], api_name="first_steps", show_progress="hidden")
    # The panel's counts follow the database while it is shown, with no reload: a timer, started by the
    # page load only when the panel is shown, and stopped by the tick that hides it.
    timer = gr.Timer(FIRST_STEPS_REFRESH_S, active=False)
    ctx.app.load(bind(first_steps_tick, ctx), None, [first_steps_panel, timer], api_name="first_steps_timer",
                 show_progress="hidden")
    timer.tick(bind(first_steps_tick, ctx), None, [first_steps_panel, timer], api_name="first_steps_tick",
               show_progress="hidden")
