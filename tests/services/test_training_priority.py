"""Training runs at a lower CPU priority than the server (issue 26): labeler.launcher.lower_priority, in a
child process each (a process cannot take back the priority it gave up, so never in the test process)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, os, subprocess, sys
from labeler.launcher import lower_priority
first = lower_priority({first})
second = lower_priority({second})  # never raises priority back
# a process started afterwards (the worker, the ranks) inherits it
inherited = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"],
                               capture_output=True, text=True).stdout)
print(json.dumps([first, second, inherited]))
"""


def _run(first, second, env_nice=None) -> list[int]:
    env = {k: v for k, v in os.environ.items() if k != "RLHF_STUDIO_TRAINING_NICE"}
    if env_nice is not None:
        env["RLHF_STUDIO_TRAINING_NICE"] = env_nice
    env["PYTHONPATH"] = str(ROOT)
    code = CHILD.format(first=first, second=second)
    # start_new_session: its own autogroup, as supervision.spawn starts the worker
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         start_new_session=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_training_is_niced_and_children_inherit_it():
    base = os.getpriority(os.PRIO_PROCESS, 0)  # pytest may itself run under nice
    first, second, inherited = _run(max(base, 7), 3)
    assert first == max(base, 7) and second == first and inherited == first


def test_the_environment_sets_the_default_and_zero_turns_it_off():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert _run(None, None, env_nice=str(max(base, 12)))[0] == max(base, 12)
    assert _run(None, None, env_nice="0")[0] == base  # unchanged
    assert _run(None, None)[0] == max(base, 10)  # the default
