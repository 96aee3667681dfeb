"""build_app(settings): the Gradio app, assembled from header.py (what sits above the tabs) and one module per tab.
Only building and wiring here: the handlers are the modules' named functions. No module-level state.

`launch(app, settings)` starts it the one way the CLI and the tests both use: Gradio's login page backed by
accounts.authenticate, an upload size cap, the shortcut script and the stylesheet.
"""
from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from labeler.services.serving.inference import ModelCache, running_runs_of
from labeler.services.data.login_guard import LoginThrottle
from labeler.ui import header
from labeler.ui.context import ServeSettings, UIContext
from labeler.ui.gradio_internals import (
    parse_file_size, quiet_queue, replace_session_tokens, skip_missing_matplotlib, trusted_proxies, trusted_proxies_of,
)
from labeler.ui.session import LOGOUT_JS, RequestGuard, SessionStore, make_auth, name_login_cookie, outside_cors
from labeler.ui.soft_errors import one_line_errors
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
SHORTCUTS_JS = (STATIC / "shortcuts.js").read_text(encoding="utf-8")
CSS = (STATIC / "studio.css").read_text(encoding="utf-8")
AUTH_MESSAGE = (
    "Log in with your RLHF Studio account. On the first start the terminal running "
    "<code>rlhf-studio serve</code> printed a one-time password for the user <b>admin</b>. "
    "After 5 wrong passwords the account waits a little before the next try. "
    "A deactivated account cannot log in: ask an admin to reactivate it."
)


def build_app(settings: ServeSettings) -> gr.Blocks:
    # delete_cache: Gradio's copies of downloads (backups, exports) and uploads leave its cache after an hour,
    # checked every 10 minutes; the folders they were copied from are swept by labeler.ui.downloads.
    with gr.Blocks(title="RLHF Studio", analytics_enabled=False, delete_cache=(600, 3600)) as app:
        # One model cache for the server, within its memory budget, emptied when a run starts (inference.py).
        models = ModelCache(settings.model_memory_bytes, running_runs=running_runs_of(settings.db_path))
        ctx = UIContext(settings, app=app, pool=ConnectionPool(settings.db_path), models=models)
        title = header.build_title_row()
        title.logout.click(None, None, None, js=LOGOUT_JS, api_name="logout")  # a POST: see session.LOGOUT_JS
        password = header.build_password_panel()
        header.wire_password_panel(ctx, password)
        main = gr.Column(elem_id="studio-main")
        with main:
            first_steps = header.build_first_steps()
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
        header.wire_page_load(ctx, title, password, main, first_steps, hidden)
        # Keyboard shortcuts run in the browser only; they click the same buttons a mouse would.
        app.load(None, None, None, js=SHORTCUTS_JS, api_name="install_shortcuts")
    one_line_errors(app)  # a malformed request: one log line and a one-line answer, not Gradio's traceback
    return app


def launch_options(settings: ServeSettings) -> dict[str, Any]:
    """Everything launch() needs besides the app, so the CLI and the tests start the app identically."""
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


def warm_imports() -> None:
    """Import what the Train tab's first preview and launch need (torch, transformers' config readers) once, in the
    background, so the first admin to press Preview does not wait for the imports (tens of seconds on a loaded
    machine). Importing the app itself still loads neither (tests/test_light_imports.py): this runs at launch."""
    import torch  # noqa: F401 - imported for its side effect: the module cache
    import transformers  # noqa: F401


def start_warm_imports() -> threading.Thread:
    """warm_imports in a daemon thread; an import error is left for the preview to report where it is needed."""
    def run() -> None:
        try:
            warm_imports()
        except Exception:  # noqa: BLE001 - the preview imports again and shows its own error
            pass

    thread = threading.Thread(target=run, name="rlhf-studio-warm-imports", daemon=True)
    thread.start()
    return thread


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
            with trusted_proxies(settings.forwarded_allow_ips):
                result = app.launch(**options)
            break
        except ValueError as error:
            # Gradio probes its own URL with a 3 s timeout and gives up when a busy machine answers late
            # ("localhost is not accessible"); the server itself is fine, so try again.
            if "localhost is not accessible" not in str(error) or attempt == 2:
                raise
            app.close()
    trusted = trusted_proxies_of(app)
    if trusted != list(settings.forwarded_allow_ips):
        app.close()
        raise RuntimeError(f"the server trusts X-Forwarded-For from {trusted}, not from "
                           f"{list(settings.forwarded_allow_ips)} as asked (gradio_internals.trusted_proxies)")
    server = app.server_app
    # An idle connection held while the server runs: without one, each request's close is the database's
    # last and SQLite checkpoints and deletes the WAL every time (20 of the 22 ms a rate_submit took).
    server.state.wal_keeper = connect(settings.db_path, create=False)
    replace_session_tokens(server, lambda sessions: SessionStore(settings.db_path, settings.session_max_age_s,
                                                                 initial=sessions))
    name_login_cookie(server, settings.db_path)
    outside_cors(server)
    start_warm_imports()
    if block:
        app.block_thread()
    return result
