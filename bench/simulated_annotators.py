"""Simulated annotators that label through the web API (gradio_client), as people do in the browser.

Each one logs in as its own user and judges by VADER's compound sentiment of the answer alone (the shipped
task's reward): a ranking puts answers within 0.1 of their group's best in one tie group (labeler.services.training.demo's
tie_groups), a rating maps compound [-1, 1] onto the project's 1..7 scale. `pace` seconds of "thinking" pass
before each submit, so five annotators at pace 2 give what five people at one label per 2 s each give.

Another task's people judge by that task's judge instead (`judge`: a function (prompts, answers) -> scores, as
bench/tasks/*/judge.py; the prompt is read from the item shown), with its own tie margin and score range. A
team's `Budget` of answers judged stops them all once spent (a ranking of 4 takes 4).

Shared by bench/label_efficiency.py, bench/human_loop.py and bench/own_task.py; bench/annotators.py's Server
starts the app.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

PASSWORD = "bench-password-1"
TIE_MARGIN = 0.1  # as labeler.services.training.demo.TIE_MARGIN


def vader_scores(texts: list[str]) -> list[float]:
    from rlhf.rewards import vader_answer

    return vader_answer([""] * len(texts), texts)


def ranks_from_scores(scores: list[float], margin: float = TIE_MARGIN) -> list[str]:
    """Rank numbers (1 = best, ties share one) for answers in the order shown, from their scores."""
    from labeler.services.training.demo import tie_groups

    groups = tie_groups(list(range(len(scores))), scores, margin)
    rank_of = {index: position + 1 for position, group in enumerate(groups) for index in group}
    return [str(rank_of[i]) for i in range(len(scores))]


def rating_from_score(score: float, low: int = 1, high: int = 7, score_range: tuple[float, float] = (-1.0, 1.0)) -> int:
    """A score in `score_range` (VADER's compound: [-1, 1]) onto the Likert scale: its ends -> low and high,
    linearly between; a score outside the range counts as its nearer end."""
    lowest, highest = score_range
    share = min(1.0, max(0.0, (score - lowest) / (highest - lowest)))
    return int(round(low + share * (high - low)))


def prompt_shown(value) -> str:
    """The prompt's text from the Rate or Rank tab's prompt widget ("### Prompt\n<text>"; a dict with a value
    when Gradio sends an update)."""
    text = value.get("value", "") if isinstance(value, dict) else (value or "")
    return text.split("\n", 1)[1] if text.startswith("### Prompt") and "\n" in text else text


class Budget:
    """Answers a team may judge in all, shared by its annotators' threads: `take(n)` reserves n, or refuses
    (False) when fewer than n are left, so the team never judges more than `total`."""

    def __init__(self, total: int):
        self.total, self.used, self.refused = int(total), 0, False
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.total:
                self.refused = True
                return False
            self.used += n
            return True

    @property
    def spent(self) -> bool:
        """All used, or an item did not fit in what is left (a budget of 10 and rankings of 4 ends at 8)."""
        with self._lock:
            return self.used >= self.total or self.refused


def add_users(db_path: str, names: list[str]) -> None:
    """The simulated people's accounts; those a kept database already has (a later run on it) are left as they are."""
    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(db_path)
    try:
        for name in names:
            if not db["users"].count_where("username = ?", [name]):
                accounts.create_user(db, name, PASSWORD)
    finally:
        db.conn.close()


@dataclass
class WebAnnotator:
    """One person at the Rate and Rank tabs: `label(kind)` judges the item shown and submits (one round trip)."""

    url: str
    username: str
    pace: float = 0.0
    # Another task's judge (prompts, answers) -> scores; None: VADER of the answer alone (the shipped task's).
    judge: Callable[[Sequence, Sequence[str]], Sequence[float]] | None = None
    margin: float = TIE_MARGIN  # answers within this of their group's best tie in a ranking
    score_range: tuple[float, float] = (-1.0, 1.0)  # the judge's scores, mapped onto the Likert scale
    budget: Budget | None = None  # the team's answers left to judge (None: no limit)
    labels: dict = field(default_factory=lambda: {"rating": 0, "ranking": 0})
    answers_judged: int = 0
    errors: int = 0

    def __post_init__(self):
        from gradio_client import Client

        for attempt in range(5):  # a server busy with training may time out the first handshake
            try:
                self.client = Client(self.url, auth=(self.username, PASSWORD), verbose=False, ssl_verify=False)
                break
            except Exception:
                if attempt == 4:
                    raise
                time.sleep(2.0)
        self._shown = {"rating": None, "ranking": None}

    def _current(self, kind: str):
        if self._shown[kind] is None:
            self._shown[kind] = self.client.predict(api_name="/rank_next" if kind == "ranking" else "/rate_next")
        return self._shown[kind]

    def refresh(self) -> None:
        self._shown = {"rating": None, "ranking": None}

    def scores(self, prompt: str, answers: list[str]) -> list[float]:
        if self.judge is None:
            return vader_scores(answers)
        return [float(s) for s in self.judge([prompt] * len(answers), answers)]

    def label(self, kind: str) -> bool:
        """Label the item shown; False when this user's queue of that kind is empty."""
        shown = self._current(kind)
        key = shown[-1] if kind == "ranking" else shown[6]
        if not key:
            self._shown[kind] = None  # ask again next time: new items may have arrived
            return False
        prompt = prompt_shown(shown[2])
        if kind == "ranking":
            texts = [shown[3 + 2 * k] for k in range(8)]
            texts = [t.split("\n\n", 1)[1] for t in texts if isinstance(t, str) and "\n\n" in t]
        else:
            texts = [shown[3] if isinstance(shown[3], str) else ""]
        if self.budget is not None and not self.budget.take(len(texts)):
            return False  # the team's budget is spent: the item stays for someone else
        if self.pace:
            time.sleep(self.pace)
        if kind == "ranking":
            ranks = ranks_from_scores(self.scores(prompt, texts), self.margin)
            self._shown[kind] = self.client.predict("", key, *ranks, api_name="/rank_submit")
            self.answers_judged += len(texts)
        else:
            score = rating_from_score(self.scores(prompt, texts)[0], score_range=self.score_range)
            self._shown[kind] = self.client.predict(score, "", key, api_name="/rate_submit")
            self.answers_judged += 1
        self.labels[kind] += 1
        return True

    def close(self) -> None:
        self.client.close()


# An annotator with nothing to label looks again after this many seconds: the Rate and Rank tabs press Refresh
# every 5 s while "All done" (labeler/ui/static/shortcuts.js, EMPTY_POLL_MS). Polling every 0.5 s instead cost the
# server and the clients about a quarter of a core, which slowed a PPO step beside them from 13 s to 19 s.
IDLE_POLL_SECONDS = 5.0


def run_team(annotators: list[WebAnnotator], kinds: tuple[str, ...], stop: threading.Event,
             idle_sleep: float = IDLE_POLL_SECONDS) -> list[threading.Thread]:
    """Each annotator in its own thread labels whatever of `kinds` its queue holds until `stop` is set."""

    def work(annotator: WebAnnotator) -> None:
        while not stop.is_set():
            try:
                if not any(annotator.label(kind) for kind in kinds if not stop.is_set()):
                    stop.wait(idle_sleep)
            except Exception as error:  # a slow server (a read timeout) or a refused submit: look again, as a person would
                annotator.errors += 1
                print(f"{annotator.username}: {type(error).__name__}: {str(error)[:120]}; refreshing", flush=True)
                annotator.refresh()
                stop.wait(idle_sleep)

    threads = [threading.Thread(target=work, args=(a,), daemon=True) for a in annotators]
    for thread in threads:
        thread.start()
    return threads
