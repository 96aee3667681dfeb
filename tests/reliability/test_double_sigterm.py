"""A cancel can deliver SIGTERM to the worker twice (to the run's process group, and forwarded by the launcher):
the first stops the run, the second must not interrupt the worker while it marks the row cancelled (a second
Cancelled raised inside that handler escaped it: the log ended in a traceback instead of "run N: cancelled")."""
from __future__ import annotations

import os
import signal
import time

import pytest

from labeler import worker


def test_the_first_sigterm_cancels_and_a_second_is_ignored():
    previous = signal.signal(signal.SIGTERM, worker._on_sigterm)
    try:
        with pytest.raises(worker.Cancelled):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises in the main thread before this ends
        os.kill(os.getpid(), signal.SIGTERM)  # the launcher's forwarded copy, during the clean-up
        time.sleep(0.2)  # raised Cancelled here before the fix
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
