"""`running_app`: the real Gradio app on a free port, logged-in accounts and labelling work seeded.

One server per test session (starting Gradio costs seconds); tests that label take items from the
shared queues and read their own rows back by user, so they do not depend on each other's order.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from helpers import serving

ADMIN = ("admin", "admin-password-1")
ANNOTATOR = ("alice", "alice-password-1")
SECOND_ANNOTATOR = ("bob", "bob-password-1")
BROWSER_ANNOTATOR = ("dana", "dana-password-1")  # only the browser test labels as dana
TINY_MODEL = "tiny"
SEED_PROMPTS = [
    "I watched this film last night and",
    "The opening scene of this thriller",
    "Honestly, the soundtrack alone",
    "My kids dragged me to this cartoon and",
    "Three hours long, but",
    "The lead actress in this drama",
    "As a fan of the original novel,",
    "This low-budget horror movie",
]
RESPONSES_PER_PROMPT = 3  # -> 24 rating items and 8 ranking items of 3


@dataclass(frozen=True)
class RunningApp:
    url: str
    db_path: str
    admin: tuple[str, str]
    annotator: tuple[str, str]
    second_annotator: tuple[str, str]
    browser_annotator: tuple[str, str]
    model_name: str
    model_dir: str
    project: str = "default"


def seed(db_path: str, model_dir: str) -> None:
    """Users, prompts, 3 answers per prompt (fixed texts: tests need no generation), rating and ranking items."""
    from labeler.services.data import accounts, labeling, prompts
    from labeler.services.serving import models
    from storage import open_db, write_transaction

    db = open_db(db_path)
    try:
        accounts.create_user(db, *ADMIN, role="admin")
        accounts.create_user(db, *ANNOTATOR)
        accounts.create_user(db, *SECOND_ANNOTATOR)
        accounts.create_user(db, *BROWSER_ANNOTATOR)
        models.register_model(db, TINY_MODEL, model_dir, "base")
        prompts.add_prompts(db, SEED_PROMPTS, source="e2e")
        with write_transaction(db):
            for prompt_id, text in db.execute("SELECT id, text FROM prompts ORDER BY id").fetchall():
                for k in range(RESPONSES_PER_PROMPT):
                    db.execute(
                        "INSERT INTO responses (prompt_id, text, model, source) VALUES (?, ?, ?, 'e2e')",
                        [prompt_id, f"{text} ... answer **{k + 1}** of {RESPONSES_PER_PROMPT}.", TINY_MODEL],
                    )
        labeling.create_items(db, "default", ranking_size=RESPONSES_PER_PROMPT)
    finally:
        db.conn.close()


@pytest.fixture(scope="session")
def running_app(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("e2e-app")
    db_path = str(root / "studio.db")
    seed(db_path, str(tiny_model_dir))
    with serving(db_path, root, model=str(tiny_model_dir), max_file_size="2mb") as server:
        yield RunningApp(
            url=server.url,
            db_path=db_path,
            admin=ADMIN,
            annotator=ANNOTATOR,
            second_annotator=SECOND_ANNOTATOR,
            browser_annotator=BROWSER_ANNOTATOR,
            model_name=TINY_MODEL,
            model_dir=str(tiny_model_dir),
        )


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Debian's chromium (scripts/setup.sh installs it). Missing: skipped locally, a failure in CI."""
    import os
    import shutil

    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "no chromium on PATH (apt-get install -y chromium; scripts/setup.sh does it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def browser(chromium_path):
    """Headless Chromium through Playwright's Python API (its own browser download does not work offline)."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path
    with sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"]
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def login(request):
    """`login(url, username, password, ready=..., page=None, height=1000)`: log in through the login form and
    return the page once `ready` is visible. Without `page`, a new page of the module's `browser`."""

    def log_in(url: str, username: str, password: str, *, ready: str = "#rate-submit", page=None, height: int = 1000):
        if page is None:
            page = request.getfixturevalue("browser").new_page(viewport={"width": 1400, "height": height})
        page.goto(url)
        page.wait_for_selector("input[type=password]", timeout=30_000)
        page.fill("input[type=text]", username)
        page.fill("input[type=password]", password)
        page.click("button:has-text('Login')")
        page.wait_for_selector(ready, state="visible", timeout=30_000)
        # The page load's own events finished too: on a loaded machine the who-is-logged-in fill came after
        # `ready`, and its "processing" overlay was taken for one of the test's own (test_smaller_browser).
        page.wait_for_selector("#studio-whoami >> text=Logged in as", timeout=30_000)
        return page

    return log_in


@pytest.fixture(scope="session")
def db_rows():
    """`db_rows(db_path, sql, params=())`: the rows as dicts, read on a connection of their own."""

    def rows(db_path: str, sql: str, params=()) -> list[dict]:
        from storage import open_db

        db = open_db(db_path)
        try:
            return [dict(row) for row in db.execute(sql, params).fetchall()]
        finally:
            db.conn.close()

    return rows
