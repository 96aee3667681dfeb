"""Slow work the Train tab waits for, said at once and while it runs: a generator handler first yields what it is
doing, then runs the work in a thread and yields the seconds so far every WAIT_TICK_S, then the result.

The first launch or preview after a server start imports the trainers' code (about 3,000 modules: 8 s on an idle
machine, 35-122 s at load 7-18), and a time estimate runs a micro-step in a fresh process (minutes
on a loaded machine); the buttons gave no sign of life meanwhile.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Generator

WAIT_TICK_S = 1.0


def in_background(work: Callable[[], Any], message: str,
                  shape: Callable[[str], Any] = lambda text: text) -> Generator[Any, None, Any]:
    """Run `work()` in a thread; yield shape(message with the seconds so far) every WAIT_TICK_S until it ends.
    Returns (`yield from`) its result, or raises its exception."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:  # re-raised in the handler's thread below
            outcome["error"] = error

    thread = threading.Thread(target=run, name="train-tab-wait", daemon=True)
    started = time.monotonic()
    thread.start()
    while True:
        thread.join(WAIT_TICK_S)
        if not thread.is_alive():
            break
        yield shape(f"{message} ({time.monotonic() - started:.0f} s so far)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
