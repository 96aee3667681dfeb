"""build_app(settings): the Gradio app, assembled from one module per tab. No module-level state.

`launch(app, settings)` starts it the one way the CLI and the tests both use: Gradio's login page backed by
accounts.authenticate, an upload size cap, the shortcut script and the stylesheet.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import gradio as gr

from labeler.services import accounts
from labeler.services.login_guard import LoginThrottle
from labeler.services.projects import project_counts
from labeler.ui.context import ServeSettings, UIContext
from labeler.ui.gradio_internals import parse_file_size, quiet_queue, replace_session_tokens, skip_missing_matplotlib
from labeler.ui.session import LOGOUT_JS, RequestGuard, SessionStore, login_throttle, make_auth
from labeler.ui.soft_errors import ui_errors  # a wrong entry: one log line, not a traceback
from storage import ConnectionPool, connect

# A tab module exposes TITLE and build(ctx) and is called inside its gr.Tab. build may return a hook that is
# called with that gr.Tab once built, to wire the tab's own events (Rate and Rank reread guidelines on select).
TAB_MODULES = [
    "labeler.ui.tabs.rate",
    "labeler.ui.tabs.rank",
    "labeler.ui.tabs.arena",
    "labeler.ui.tabs.chat",
    "labeler.ui.tabs.data",
    "labeler.ui.tabs.records",
    "labeler.ui.tabs.train",
    "labeler.ui.tabs.admin",
]
# Tabs an annotator does not see. Hiding is a courtesy only: every admin handler checks the role itself.
ADMIN_TABS = {"data", "records", "train", "admin"}
STATIC = Path(__file__).parent / "static"
FIRST_STEPS_REFRESH_S = 5.0  # seconds between the first-steps panel's re-reads while it is shown
SHORTCUTS_JS = (STATIC / "shortcuts.js").read_text(encoding="utf-8")
CSS = (STATIC / "studio.css").read_text(encoding="utf-8")
AUTH_MESSAGE = (
    "Log in with your RLHF Studio account. On the first start the terminal running "
    "<code>rlhf-studio serve</code> printed a one-time password for the user <b>admin</b>. "
    "After 5 wrong passwords the account waits a little before the next try. "
    "A deactivated account cannot log in: ask an admin to reactivate it."
)


def first_steps_markdown(counts: dict[str, int], project: str) -> str:
    """The admin's "what to do first" on a project without prompts or labels; done steps are ticked."""

    def step(done: bool, text: str) -> str:
        return f"- {'✅' if done else '⬜'} {text}"

    labels = counts["ratings"] + counts["rankings"]
    return "\n".join([
        f"### First steps for project **{project}**",
        step(counts["prompts"] > 0, f"**Import prompts**: **Data > 1. Prompts**, upload a file or import the shipped "
                                    f"movie-review prompts ({counts['prompts']} so far)."),
        step(counts["responses"] > 0, f"**Generate answers**: **Data > 2. Generate answers** with a model "
                                      f"({counts['responses']} so far). Add annotators in **Admin > Users**."),
        step(labels > 0, f"**Rate and rank**: the **Rate** and **Rank** tabs, from the keyboard ({labels} labels "
                         "so far)."),
        step(False, "**Train**: a reward model, then DPO or PPO, in the **Train** tab (or export a dataset in "
                    "**Data > 3. Export**)."),
        "",
        "This panel goes away once the project has prompts and labels.",
    ])


def build_app(settings: ServeSettings) -> gr.Blocks:
    # delete_cache: Gradio's copies of downloads (backups, exports) and uploads leave its cache after an hour,
    # checked every 10 minutes; the folders they were copied from are swept by labeler.ui.downloads.
    with gr.Blocks(title="RLHF Studio", analytics_enabled=False, delete_cache=(600, 3600)) as app:
        ctx = UIContext(settings, app=app, pool=ConnectionPool(settings.db_path))
        with gr.Row(equal_height=True):
            gr.Markdown("# RLHF Studio", elem_id="studio-title")
            whoami = gr.Markdown(elem_id="studio-whoami")
            logout = gr.Button("Log out", size="sm", scale=0, min_width=100, elem_id="studio-logout")
        logout.click(None, None, None, js=LOGOUT_JS, api_name="logout")  # a POST: see session.LOGOUT_JS
        password_panel, main = _password_panel(ctx)
        with main:
            first_steps = gr.Markdown(visible=False, elem_id="studio-first-steps", elem_classes=["studio-banner"])
        tabs: dict[str, gr.Tab] = {}
        with main, gr.Tabs():
            for module_name in TAB_MODULES:
                module = importlib.import_module(module_name)
                tab_id = module_name.rsplit(".", 1)[-1]
                # Admin tabs start hidden and are revealed on load for admins: Gradio 6.31 can show a
                # hidden tab from an event but not hide a shown one.
                with gr.Tab(module.TITLE, id=tab_id, visible=tab_id not in ADMIN_TABS) as tab:
                    on_tab = module.build(ctx)
                if callable(on_tab):
                    on_tab(tab)
                tabs[tab_id] = tab

        hidden = [tabs[name] for name in sorted(ADMIN_TABS & tabs.keys())]

        def whoami_load(request: gr.Request):
            with ctx.connection() as db:
                user = accounts.get_user(db, getattr(request, "username", None) or "")
            if user is None:
                return ("", gr.update(visible=False), gr.update(), *[gr.update(visible=False) for _ in hidden])
            is_admin = user.role == "admin"
            text = f"Logged in as **{user.username}** ({user.role}) · project **{settings.project}**"
            # A one-time password: only the panel to replace it (the server refuses everything else anyway).
            first_login = user.must_change_password
            return (
                text, gr.update(visible=first_login), gr.update(visible=not first_login),
                *[gr.update(visible=is_admin) for _ in hidden],
            )

        def first_steps_load(request: gr.Request):
            """An admin on a project without prompts or labels: what to do first."""
            with ctx.connection() as db:
                user = accounts.get_user(db, getattr(request, "username", None) or "")
                if user is None or user.role != "admin":
                    return gr.update(visible=False)
                counts = project_counts(db, settings.project)
            if counts["prompts"] and counts["ratings"] + counts["rankings"]:
                return gr.update(visible=False)
            return gr.update(value=first_steps_markdown(counts, settings.project), visible=True)

        app.load(whoami_load, None, [whoami, password_panel, main, *hidden], api_name="whoami")
        app.load(first_steps_load, None, [first_steps], api_name="first_steps", show_progress="hidden")
        # The panel's counts follow the database while it is shown, with no reload: a timer, started by the
        # page load only when the panel is shown, and stopped by the tick that hides it.
        first_steps_timer = gr.Timer(FIRST_STEPS_REFRESH_S, active=False)

        def first_steps_tick(request: gr.Request):
            shown = first_steps_load(request)
            return shown, gr.Timer(active=bool(shown.get("visible")))

        app.load(first_steps_tick, None, [first_steps, first_steps_timer], api_name="first_steps_timer",
                 show_progress="hidden")
        first_steps_timer.tick(first_steps_tick, None, [first_steps, first_steps_timer], api_name="first_steps_tick",
                               show_progress="hidden")
        # Keyboard shortcuts run in the browser only; they click the same buttons a mouse would.
        app.load(None, None, None, js=SHORTCUTS_JS, api_name="install_shortcuts")
    return app


def _password_panel(ctx: UIContext) -> tuple[gr.Column, gr.Column]:
    """(the first-login panel, the column holding the tabs). The panel is shown instead of the tabs to a user
    whose password is the one-time one `serve` printed."""
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
    main = gr.Column(elem_id="studio-main")

    # ui_errors (a red toast, the event fails): .success below must not run after a refusal.
    @ui_errors
    def change_password(current_value, new_value, repeat_value, request: gr.Request):
        throttle, address = login_throttle(request)  # wrong current passwords count like wrong logins
        with ctx.connection() as db:
            accounts.change_own_password(db, UIContext.username(request), current_value, new_value, repeat_value,
                                         throttle=throttle, address=address)
        return "Password changed. Log in again with the new password."

    # The change ends this browser's session (the session epoch moved on): back to the login page.
    change.click(change_password, [current, new, repeat], [status], api_name="change_own_password").success(
        None, None, None, js=f"() => {{ setTimeout({LOGOUT_JS}, 1500); }}",
        api_name="change_own_password_done",
    )
    return panel, main


def launch_options(settings: ServeSettings) -> dict[str, Any]:
    """Everything launch() needs besides the app, so the CLI and the tests start the app identically."""
    from starlette.middleware import Middleware

    return {
        "auth": make_auth(settings.db_path, LoginThrottle(settings.login_throttle)),
        "auth_message": AUTH_MESSAGE,
        "server_name": settings.host,
        "server_port": settings.port,
        "root_path": settings.root_path or None,
        "max_file_size": settings.max_file_size,
        "css": CSS,
        # False: an unexpected exception reaches the browser as a bare "Error", not its message, which can
        # hold server paths. Our own errors (gr.Error from InputError / PermissionDenied) are shown either way.
        "show_error": False,
        "footer_links": ["api", "gradio"],
        # No /monitoring dashboard: nobody reads it, and it costs every event (see quiet_queue).
        "enable_monitoring": False,
        # Gradio passes app_kwargs to its FastAPI app; `middleware` there wraps every route.
        "app_kwargs": {"middleware": [Middleware(
            RequestGuard, allowed_origins=settings.allowed_origins,
            max_upload_bytes=parse_file_size(settings.max_file_size),
            max_upload_files=settings.max_upload_files)]},
    }


def launch(app: gr.Blocks, settings: ServeSettings, **overrides: Any):
    """app.launch with launch_options(settings); overrides (prevent_thread_lock, quiet, ...) win.

    Starts the server without blocking, swaps Gradio's session dict for a SessionStore (expiry, password
    changes), then blocks unless the caller passed prevent_thread_lock=True.
    """
    options = {**launch_options(settings), **overrides}
    quiet_queue(app)
    skip_missing_matplotlib()
    block = not options.get("prevent_thread_lock", False)
    options["prevent_thread_lock"] = True
    for attempt in range(3):
        try:
            result = app.launch(**options)
            break
        except ValueError as error:
            # Gradio probes its own URL with a 3 s timeout and gives up when a busy machine answers late
            # ("localhost is not accessible"); the server itself is fine, so try again.
            if "localhost is not accessible" not in str(error) or attempt == 2:
                raise
            app.close()
    server = app.server_app
    # An idle connection held while the server runs: without one, each request's close is the database's
    # last and SQLite checkpoints and deletes the WAL every time (20 of the 22 ms a rate_submit took).
    server.state.wal_keeper = connect(settings.db_path, create=False)
    replace_session_tokens(server, lambda sessions: SessionStore(settings.db_path, settings.session_max_age_s,
                                                                 initial=sessions))
    if block:
        app.block_thread()
    return result
