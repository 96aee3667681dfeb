"""The server's Gradio queue skips per-event work a labelling server does not use (issue 15).

These read Gradio's private queue attributes on purpose: if an upgrade renames them, quiet_queue would
silently do nothing, and this test is what notices.
"""
from __future__ import annotations

import gradio as gr

from labeler.ui.app import STATUS_UPDATE_S, launch_options, quiet_queue, skip_missing_matplotlib
from labeler.ui.context import ServeSettings


def test_quiet_queue_sends_positions_on_a_timer_and_builds_no_monitoring_summary(monkeypatch):
    with gr.Blocks() as app:
        gr.Button("x").click(lambda: None, api_name="noop")
    assert app._queue.live_updates is True  # Gradio's default: positions to every waiting client per job start
    quiet_queue(app)
    queue = app._queue
    assert queue.live_updates is False and queue.update_intervals == STATUS_UPDATE_S

    def no_dataframes(records):
        raise AssertionError("the monitoring summary was rebuilt")

    monkeypatch.setattr(queue, "_get_df", no_dataframes)
    records = [{"time": 1.0, "status": "success", "process_time": 0.01, "function": "noop", "session_hash": "s"}]
    for _ in range(3):  # as process_events does after every event
        queue.events_recorded += 1
        assert queue.compute_analytics_summary(records) == {"functions": {}}
    assert queue.ANALYTICS_MAX_EVENTS == 1  # the event log it would summarise is kept at one entry


def test_the_monitoring_endpoint_is_off():
    assert launch_options(ServeSettings(db_path=":memory:"))["enable_monitoring"] is False



def test_without_matplotlib_gradio_no_longer_tries_to_import_it_per_event(monkeypatch):
    import contextlib
    import importlib.util

    import gradio.route_utils
    import gradio.utils

    original = gradio.utils.MatplotlibBackendMananger
    monkeypatch.setattr(gradio.utils, "MatplotlibBackendMananger", original)  # restored after the test
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a))
    assert skip_missing_matplotlib() is True
    assert gradio.utils.MatplotlibBackendMananger is contextlib.nullcontext
    # call_process_api reaches it through the module at call time, so the swap is what it uses.
    assert "utils.MatplotlibBackendMananger()" in open(gradio.route_utils.__file__).read()
    # With matplotlib installed, Gradio's own manager stays.
    monkeypatch.setattr(gradio.utils, "MatplotlibBackendMananger", original)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "matplotlib" else real_find_spec(name, *a))
    assert skip_missing_matplotlib() is False and gradio.utils.MatplotlibBackendMananger is original
