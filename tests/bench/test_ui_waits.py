"""bench/ui_waits.py's pure parts: the endpoint's arguments as the page starts them with the script's overrides,
first and later waits, and the table's ratios (the measurement itself starts servers: run it alone); and the
server it measures, started by bench/annotators.py's Server with this script's flags and environment."""
from __future__ import annotations

import sys
import urllib.request
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


def test_the_server_is_annotators_server_with_this_script_s_flags_and_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the script's own threads, which a PPO preview's micro-step gets
    started = []
    real = ui_waits.Server
    monkeypatch.setattr(ui_waits, "Server", lambda *args, **kwargs: started.append(real(*args, **kwargs))
                        or started[-1])
    with ui_waits.server(str(tmp_path / "studio.db"), "default", tmp_path, "quiet") as (url, start_s):
        pid = started[0].process.pid
        flags = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        env = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
                   if "=" in item)
        with urllib.request.urlopen(url + "/", timeout=60) as page:  # the login page
            assert page.status == 200
    assert url == f"http://127.0.0.1:{started[0].port}" and start_s > 0
    assert flags[flags.index("--model") + 1] == "default"
    assert flags[flags.index("--runs-dir") + 1] == str(tmp_path / "runs")
    assert (env["OMP_NUM_THREADS"], env["HF_HUB_OFFLINE"], env["GRADIO_ANALYTICS_ENABLED"]) == ("3", "1", "False")
    assert str(ROOT) in env["PYTHONPATH"].split(":") and (tmp_path / "serve-quiet.log").exists()
    assert started[0].process.poll() is not None  # stopped on leaving
