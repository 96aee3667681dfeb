"""Screenshots of a real running app for the README: Rate, Rank, a PPO run with its plots and before/after table,
and Chat, written to docs/screenshots/ (rate.png, rank.png, train.png, train-running.png, chat.png).

    python3 scripts/screenshots.py                 # the embedded default model (answers read like text)
    python3 scripts/screenshots.py --model tiny    # a 2-layer random model: fast, answers are noise
    python3 scripts/screenshots.py --only rate,rank   # the labelling tabs alone (no chat, no PPO run)

It starts the app on a temporary database, imports the shipped movie-review prompts, generates answers with
the model, launches a small PPO run from the Train tab and drives Debian's Chromium through Playwright, as
tests/e2e does. Nothing is mocked, so the pictures show what the app shows today. The project asks two criteria
and two flags beside its score (QUESTIONS), so Rate and Rank show a team's questions as they are labelled.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ADMIN = ("admin", "admin-password-1")
ANNOTATOR = ("ana", "ana-password-1")
# The shipped prompts make a continuation project (prompt format 'continue'): the message is an opening to go on.
CHAT_MESSAGE = "The film I liked most this year was"
# A small PPO run: 3 steps of 2 prompts x 2 answers, 8 new tokens, VADER sentiment as the reward.
RUN_SETTINGS = ("steps=3\nbatch_size=2\nanswers_per_prompt=2\nmini_batch_size=2\nppo_epochs=1\nmax_new_tokens=8\n"
                "checkpoint_every=0")
# What the project asks beside its score, as `rlhf-studio questions add` sets it: (name, kind, min, max, guideline).
QUESTIONS = (("fluent", "criterion", 1, 5, "Does it read as a person would write it?"),
             ("on-topic", "criterion", 1, 5, "Does it stay with the film?"),
             ("spoiler", "flag", 1, 5, ""), ("offensive", "flag", 1, 5, ""))
SHOTS = ("rate", "rank", "chat", "train")


def seed(db_path: str, model: str, prompts_n: int, new_tokens: int) -> None:
    """Accounts, the shipped prompts (one held out for the run's evaluation), three answers to each of the first
    `prompts_n` prompts from the model (rating items and ranking items of three)."""
    from labeler.services.data import accounts, prompts
    from labeler.services.labels import questions
    from labeler.services.serving import generation, models
    from rlhf.configs import GenerationSettings
    from storage import open_db

    db = open_db(db_path)
    try:
        accounts.create_user(db, *ADMIN, role="admin")
        accounts.create_user(db, *ANNOTATOR)
        prompts.import_shipped_prompts(db)
        for name, kind, low, high, guideline in QUESTIONS:
            questions.add_question(db, "default", name, kind, low, high, guideline)
        held_out = db.execute("SELECT MAX(id) FROM prompts").fetchone()[0]
        db.execute("UPDATE prompts SET split = 'test' WHERE id = ?", [held_out])
        if model != "default":
            models.register_model(db, "tiny", model, "base")
        settings = GenerationSettings(max_new_tokens=new_tokens, temperature=0.9, top_p=0.95, batch_size=6, seed=0)
        started = time.monotonic()
        ids = generation.generate_responses(db, model="tiny" if model != "default" else "default", n_per_prompt=3,
                                            settings=settings, limit=prompts_n, ranking_size=3)
        print(f"generated {len(ids)} answers in {time.monotonic() - started:.0f} s", flush=True)
    finally:
        db.conn.close()


def log_in(browser, url: str, user: tuple[str, str], ready: str, height: int = 900):
    page = browser.new_page(viewport={"width": 1280, "height": height})
    page.goto(url)
    page.wait_for_selector("input[type=password]", timeout=60_000)
    page.fill("input[type=text]", user[0])
    page.fill("input[type=password]", user[1])
    page.click("button:has-text('Login')")
    page.wait_for_selector(ready, state="visible", timeout=60_000)
    return page


def wait_text(page, elem_id: str, text: str, timeout_s: float) -> None:
    page.wait_for_function("([id, t]) => ((document.getElementById(id) || {}).innerText || '').includes(t)",
                           arg=[elem_id, text], timeout=int(timeout_s * 1000))


def settle(page, ms: int = 800) -> None:
    page.wait_for_timeout(ms)  # fonts and the last update drawn


def shoot_between(page, path: Path, first: str, last: str) -> None:
    """The page from the top of `first` to the bottom of `last` (CSS selectors): the part worth showing."""
    box = page.evaluate("""([a, b]) => { const top = document.querySelector(a).getBoundingClientRect().top + scrollY;
        const bottom = document.querySelector(b).getBoundingClientRect().bottom + scrollY;
        return {x: 0, y: Math.max(0, top - 12), width: document.documentElement.clientWidth, height: bottom - top + 24}; }""",
                        [first, last])
    page.screenshot(path=str(path), clip=box, full_page=True)


def shoot(url: str, out: Path, model_name: str, chromium: str, run_timeout_s: float, db_path: str,
          only: tuple[str, ...] = SHOTS) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"])
        try:
            _shoot(browser, url, out, model_name, run_timeout_s, db_path, only)
        except Exception:
            for number, page in enumerate([page for context in browser.contexts for page in context.pages]):
                try:
                    page.screenshot(path=str(out / f"failed-{number}.png"), full_page=True)  # what the page showed
                except Exception:  # noqa: BLE001 - a crashed page has nothing to show; the first error matters
                    pass
            raise
        browser.close()


def wait_for_run(db_path: str, timeout_s: float) -> None:
    """Until the newest run has finished and its held-out evaluation is stored (read from SQLite: a page left
    open for the whole run is one more thing that can go wrong)."""
    from storage import open_db

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        db = open_db(db_path)
        try:
            run = db.execute("SELECT id, status, error FROM runs ORDER BY id DESC LIMIT 1").fetchone()
            evaluated = run is not None and db.execute("SELECT COUNT(*) FROM evaluations WHERE run_id = ?",
                                                       [run["id"]]).fetchone()[0]
        finally:
            db.conn.close()
        if run is not None and run["status"] in ("failed", "cancelled"):
            raise RuntimeError(f"run {run['id']} {run['status']}: {run['error']}")
        if evaluated:
            return
        time.sleep(5)
    raise TimeoutError(f"the run did not finish in {timeout_s:.0f} s")


def _shoot(browser, url: str, out: Path, model_name: str, run_timeout_s: float, db_path: str,
           only: tuple[str, ...]) -> None:
    # Rate and Rank, as an annotator sees them: on Rate the score typed and the first criterion scored by keyboard.
    page = log_in(browser, url, ANNOTATOR, "#rate-submit")
    page.wait_for_function("() => document.querySelector('#rate-key input, #rate-key textarea')?.value")
    if "rate" in only:
        settle(page)
        page.keyboard.press("5")  # the score, then the highlight moves to the first criterion
        page.keyboard.press("4")  # fluent: 4; the highlight moves on to on-topic
        settle(page)
        page.screenshot(path=str(out / "rate.png"), full_page=True)
    if "rank" in only:
        page.click("button[role=tab]:has-text('Rank')")
        page.wait_for_selector("#rank-submit", state="visible")
        wait_text(page, "rank-counter", "remaining", 30)
        settle(page)
        page.screenshot(path=str(out / "rank.png"), full_page=True)
    if "chat" in only:
        shoot_chat(page, out, model_name)
    page.close()
    if "train" in only:
        shoot_train(browser, url, out, model_name, run_timeout_s, db_path)


def shoot_chat(page, out: Path, model_name: str) -> None:
    """Chat: one question, the streamed answer named by its model."""
    page.click("button[role=tab]:has-text('Chat')")
    page.wait_for_selector("#chat-input", state="visible")
    page.click("#chat-model input")
    page.click(f"ul[role=listbox] li:text-is('{model_name}')")
    page.fill("#chat-input textarea", CHAT_MESSAGE)
    page.press("#chat-input textarea", "Enter")
    # The answer's bubble starts with "answered by <model>": wait for some text after it.
    page.wait_for_function("(n) => { const b = document.querySelectorAll('#chat-chatbot [data-testid=bot]');"
                           " return b.length && b[b.length - 1].innerText.trim().length > n; }",
                           arg=len(f"answered by {model_name}") + 20, timeout=180_000)
    previous, deadline = None, time.monotonic() + 180
    while time.monotonic() < deadline:  # streamed: wait until the answer stops changing
        now = page.inner_text("#chat-chatbot")
        if now == previous:
            break
        previous = now
        page.wait_for_timeout(1500)
    page.screenshot(path=str(out / "chat.png"))


def shoot_train(browser, url: str, out: Path, model_name: str, run_timeout_s: float, db_path: str) -> None:
    """Train: a small PPO run launched from the form, shot while it runs and once it has finished."""
    page = log_in(browser, url, ADMIN, "button[role=tab]:has-text('Train')", height=1000)
    page.click("button[role=tab]:has-text('Train')")
    page.click("#train-stage label:has-text('PPO')")
    page.wait_for_selector("#train-reward", state="visible")
    page.click("#train-reward input")  # the Reward picker: VADER's sentiment of the answer
    page.click("ul[role=listbox] li:has-text('Sentiment (VADER)')")
    model_input = page.locator("#train-model input")
    model_input.fill(model_name)
    model_input.press("Enter")
    page.click("text=Advanced settings")
    page.fill("#train-advanced textarea", RUN_SETTINGS)
    page.click("text=Advanced settings")  # folded again: the picture shows the short form
    page.click("#train-launch")
    wait_text(page, "train-notice", "Run #", 60)
    page.wait_for_function("() => document.querySelectorAll('#train-plot polyline').length > 0",
                           timeout=int(run_timeout_s * 1000))
    settle(page, 2500)
    shoot_between(page, out / "train-running.png", "#train-stage", "#train-reward-curve")
    page.close()
    wait_for_run(db_path, run_timeout_s)
    page = log_in(browser, url, ADMIN, "button[role=tab]:has-text('Train')", height=1000)
    page.click("button[role=tab]:has-text('Train')")
    wait_text(page, "train-status", "succeeded", 60)
    page.wait_for_function("() => (document.getElementById('train-comparison') || {}).innerText?.includes('after')",
                           timeout=120_000)
    settle(page, 2500)
    shoot_between(page, out / "train.png", "#train-status", "#train-answers")
    page.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["default", "tiny"], default="default",
                        help="the embedded default model (text that reads), or a tiny random one (fast)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"), help="folder for the PNG files")
    parser.add_argument("--prompts", type=int, default=4, help="prompts given three answers each")
    parser.add_argument("--new-tokens", type=int, default=40, help="length of the generated answers")
    parser.add_argument("--run-timeout", type=float, default=900, help="seconds the PPO run may take")
    parser.add_argument("--only", default=",".join(SHOTS), help=f"comma-separated, of {', '.join(SHOTS)}")
    args = parser.parse_args(argv)
    only = tuple(name.strip() for name in args.only.split(","))
    if unknown := [name for name in only if name not in SHOTS]:
        parser.error(f"--only: unknown {', '.join(unknown)} (known: {', '.join(SHOTS)})")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no chromium on PATH (apt-get install -y chromium; scripts/setup.sh does it)", file=sys.stderr)
        return 2

    # Not `launch`: the UI's launch() below has that name.
    from labeler.services.execution.launch import LAUNCHER_ENV, free_port
    from rlhf.loading import save_tiny_llama  # the tests' tiny model
    from labeler.ui.app import build_app, launch
    from labeler.ui.context import ServeSettings

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault(LAUNCHER_ENV, "python")  # the worker as a plain process, as the browser tests run it
    with tempfile.TemporaryDirectory(prefix="rlhf-studio-screenshots-") as tmp:
        root = Path(tmp)
        model = "default" if args.model == "default" else str(save_tiny_llama(root / "tiny"))
        db_path = str(root / "studio.db")
        seed(db_path, model, args.prompts, args.new_tokens)
        settings = ServeSettings(db_path=db_path, port=free_port(), model=model, runs_dir=str(root / "runs"))
        app = build_app(settings)
        launch(app, settings, prevent_thread_lock=True, quiet=True)
        try:
            shoot(f"http://127.0.0.1:{settings.port}/", out, "tiny" if args.model == "tiny" else "default", chromium,
                  args.run_timeout, db_path, only)
        finally:
            app.close()
    for name in only:
        for shot in ("train-running", "train") if name == "train" else (name,):
            print(out / f"{shot}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
