"""bench/ui_waits.py's pure parts: the endpoint's arguments as the page starts them with the script's overrides,
first and later waits, and the table's ratios (the measurement itself starts servers: run it alone)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import ui_waits  # noqa: E402


class FakeClient:
    def view_api(self, print_info=False, return_format=None):
        parameters = [{"label": "What to train", "parameter_default": "rm"},
                      {"label": "How long (training steps)", "parameter_default": 40},
                      {"label": "Batch size", "parameter_default": 8}]
        return {"named_endpoints": {"/train_preview": {"parameters": parameters}}}


def test_arguments_keep_the_page_defaults_but_the_labels_overridden():
    assert ui_waits.arguments(FakeClient(), "train_preview", {"What to train": "dpo", "How long (training steps)": 1}) \
        == ["dpo", 1, 8]


def test_first_and_later_waits_and_their_ratios():
    quiet, loaded = ui_waits.Waits(start_s=10.0), ui_waits.Waits(start_s=25.0)
    for op in ui_waits.OPERATIONS:
        quiet.seconds[op] = [4.0, 1.0, 3.0, 2.0]  # first 4; later: median of 1, 3, 2 = 2
        loaded.seconds[op] = [12.0, 5.0]  # first 12; later 5
    assert (quiet.first("login"), quiet.median("login"), loaded.median("login")) == (4.0, 2.0, 5.0)
    lines = ui_waits.table(quiet, loaded, 8).splitlines()
    # server start 10 -> 25 s: 2.5 both; each operation: first 12 / 4 = 3.0, later 5 / 2 = 2.5
    assert lines[2].split() == ["server", "start", "10.00", "10.00", "25.00", "25.00", "2.5", "2.5"]
    assert lines[3].split() == ["login", "4.00", "2.00", "12.00", "5.00", "3.0", "2.5"]
    assert len(lines) == 3 + len(ui_waits.OPERATIONS)


def test_one_repeat_is_its_own_later_wait():
    waits = ui_waits.Waits()
    waits.seconds["login"] = [7.0]
    assert waits.median("login") == 7.0
