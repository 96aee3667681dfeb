"""Simulated annotators that label through the web API (gradio_client), as people do in the browser.

Each one logs in as its own user and judges by VADER's compound sentiment of the answer alone (the shipped
task's reward): a ranking puts answers within 0.1 of their group's best in one tie group (labeler.services.demo's
tie_groups), a rating maps compound [-1, 1] onto the project's 1..7 scale. `pace` seconds of "thinking" pass
before each submit, so five annotators at pace 2 give what five people at one label per 2 s each give.

Shared by bench/label_efficiency.py and bench/human_loop.py; bench/annotators.py's Server starts the app.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

PASSWORD = "bench-password-1"
TIE_MARGIN = 0.1  # as labeler.services.demo.TIE_MARGIN


def vader_scores(texts: list[str]) -> list[float]:
    from rlhf.rewards import vader_answer

    return vader_answer([""] * len(texts), texts)


def ranks_from_scores(scores: list[float], margin: float = TIE_MARGIN) -> list[str]:
    """Rank numbers (1 = best, ties share one) for answers in the order shown, from their scores."""
    from labeler.services.demo import tie_groups

    groups = tie_groups(list(range(len(scores))), scores, margin)
    rank_of = {index: position + 1 for position, group in enumerate(groups) for index in group}
    return [str(rank_of[i]) for i in range(len(scores))]


def rating_from_score(score: float, low: int = 1, high: int = 7) -> int:
    """VADER compound in [-1, 1] onto the Likert scale: -1 -> low, 0 -> the middle, +1 -> high."""
    return int(round(low + (score + 1) / 2 * (high - low)))


def add_users(db_path: str, names: list[str]) -> None:
    from labeler.services import accounts
    from storage import open_db

    db = open_db(db_path)
    try:
        for name in names:
            accounts.create_user(db, name, PASSWORD)
    finally:
        db.conn.close()


@dataclass
class WebAnnotator:
    """One person at the Rate and Rank tabs: `label(kind)` judges the item shown and submits (one round trip)."""

    url: str
    username: str
    pace: float = 0.0
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

    def label(self, kind: str) -> bool:
        """Label the item shown; False when this user's queue of that kind is empty."""
        shown = self._current(kind)
        key = shown[-1] if kind == "ranking" else shown[6]
        if not key:
            self._shown[kind] = None  # ask again next time: new items may have arrived
            return False
        if self.pace:
            time.sleep(self.pace)
        if kind == "ranking":
            texts = [shown[3 + 2 * k] for k in range(8)]
            texts = [t.split("\n\n", 1)[1] for t in texts if isinstance(t, str) and "\n\n" in t]
            ranks = ranks_from_scores(vader_scores(texts))
            self._shown[kind] = self.client.predict("", key, *ranks, api_name="/rank_submit")
            self.answers_judged += len(texts)
        else:
            answer = shown[3] if isinstance(shown[3], str) else ""
            score = rating_from_score(vader_scores([answer])[0])
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
