"""What every tab receives: where the database is and the server settings. Holds no user state (a pool of
idle database connections, and the server's one cache of loaded models with its queue of answers).

The project a request works in is the person's own choice (projects.chosen_project, kept in SQLite so it
survives a refresh), else the server's `--project`. The role check that every handler makes first
(roles.check_role) reads that choice once per request and puts it in a context variable, which `ctx.project`
returns: each Gradio event runs in its own copy of the context (anyio's to_thread copies it), so one person's
choice is never seen by another's request, and the 74 handlers that read `ctx.project` need no extra parameter.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Iterator

import gradio as gr
import sqlite_utils

from labeler.errors import PermissionDenied
from labeler.services.serving.inference import ModelCache
from labeler.services.data.projects import chosen_project
from labeler.services.data.login_guard import ThrottlePolicy
from storage import ConnectionPool, open_db

SESSION_DAYS = 7
# The Gradio queue settings of every event that generates for a person (chat_send, chat_submit, chat_best_of_n,
# arena_start): one shared group whose limit only bounds Gradio's worker threads. The server's own queue
# (ctx.models.turns) admits them to the cap on generations at once and tells each person their place.
GENERATING_EVENTS = {"concurrency_id": "generating", "concurrency_limit": 64}
# (the ServeSettings of the app that resolved it, the project) for the request being handled; not shared state:
# a context variable, set per request by UIContext.enter_project and read only within that request's context.
# Keyed by the settings so two apps in one process (the tests) never read each other's.
_REQUEST_PROJECT: contextvars.ContextVar[tuple[object, str] | None] = contextvars.ContextVar(
    "rlhf_studio_request_project", default=None)


@dataclass(frozen=True)
class ServeSettings:
    db_path: str = "data/studio.db"
    host: str = "127.0.0.1"
    port: int = 7860
    model: str = "default"
    project: str = "default"
    max_file_size: str = "50mb"  # largest upload (uploads are for admins only; session.RequestGuard)
    max_upload_files: int = 1  # files in one upload request at most (every upload field takes one file)
    runs_dir: str = "runs"
    # Origins besides the server itself whose browser requests are accepted (e.g. "https://studio.example.org").
    allowed_origins: tuple[str, ...] = ()
    session_max_age_s: float = SESSION_DAYS * 86400.0
    login_throttle: ThrottlePolicy = field(default_factory=ThrottlePolicy)
    # Proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (addresses or networks); none by default.
    forwarded_allow_ips: tuple[str, ...] = ()
    # One chat, best-of-N or arena request's elapsed time at most once its turn comes (services.chat.request_bounds,
    # MAX_REQUEST_S): the answer stops there.
    chat_budget_s: float = 60.0
    # Bytes the loaded models may hold together (services.inference.ModelCache); None: half the GPU's memory, or a
    # quarter of the host's without a GPU.
    model_memory_bytes: int | None = None
    root_path: str = ""  # the URL path behind a reverse proxy ("/studio"); "" when served at the root
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class UIContext:
    settings: ServeSettings
    # The Blocks being built, so a tab can register page-load events (ctx.app.load). Not state: never reassigned.
    app: gr.Blocks | None = None
    # Idle connections reused by requests (build_app makes one); None: a fresh connection per request.
    pool: ConnectionPool | None = field(default=None, compare=False)
    # The server's one model cache (Chat, Arena, best-of-N, Data > Generate): one per app, never a module global.
    models: ModelCache = field(default_factory=ModelCache, compare=False)

    @property
    def db_path(self) -> str:
        return self.settings.db_path

    @property
    def project(self) -> str:
        """The project of the request being handled: the person's choice (enter_project), else --project."""
        current = _REQUEST_PROJECT.get()
        if current is not None and current[0] is self.settings:
            return current[1]
        return self.settings.project

    def project_of(self, db: sqlite_utils.Database, username: str) -> str:
        """`username`'s chosen project, else the server's."""
        return chosen_project(db, username, self.settings.project)

    def enter_project(self, db: sqlite_utils.Database, username: str) -> contextvars.Token:
        """This request works in `username`'s chosen project from here on (called by the role check)."""
        return _REQUEST_PROJECT.set((self.settings, self.project_of(db, username)))

    @staticmethod
    def leave_project(token: contextvars.Token) -> None:
        _REQUEST_PROJECT.reset(token)

    def db(self) -> sqlite_utils.Database:
        """A fresh connection for this request: never one shared across Gradio's worker threads.

        Opened without migrating or creating: `serve` migrated at start-up, and a request must not wait for
        the write lock (held by an import or a backup in another process) just to open the database.
        """
        return open_db(self.db_path, migrate=False, create=False)

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite_utils.Database]:
        """`with ctx.connection() as db:` a connection for this request alone: from the pool (and back to it),
        or opened as `db()` does and closed afterwards."""
        if self.pool is not None:
            with self.pool.connection() as db:
                yield db
            return
        db = self.db()
        try:
            yield db
        finally:
            db.conn.close()

    @staticmethod
    def username(request: gr.Request | None) -> str:
        """The logged-in user's name; every handler checks it itself (hidden endpoints can still be called)."""
        name = getattr(request, "username", None) if request is not None else None
        if not name:
            raise PermissionDenied("not logged in")
        return name
