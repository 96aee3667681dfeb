"""Issue 37 item 7 through the web API, what the page is sent: no developer leftovers where people read. Data >
Export's options are labelled in words (they read since, until, min_annotators, include_rating_pairs, zscore), the
Records, audit, Quality and Admin > Models tables' headers are words (mean_score and gold_accuracy broke mid-word;
base_model, created_at), the Train charts' legends say what a line is (env/reward_mean), and Undo's toast names no
item id."""
from __future__ import annotations

import asyncio
import re

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

RAW_EXPORT_FIELDS = {"since", "until", "min_annotators", "min_agreement", "include_rating_pairs", "zscore"}
FIELD_NAME = re.compile(r"^[a-z]+(_[a-z]+)+$|/")  # snake_case or a metric path
LEGEND = re.compile(r'class="studio-chart-legend-item">.*?<text[^>]*>([^<]+)</text>')


def test_export_options_and_table_headers_are_words(running_app):
    admin = Client(running_app.url, auth=running_app.admin, verbose=False)
    labels = {c["props"].get("label") for c in admin.config["components"]}
    assert not labels & RAW_EXPORT_FIELDS
    assert {"Labelled on or after (date)", "Labelled by at least N people", "Also turn ratings into preference pairs",
            "Standardise each annotator's scores (z-scores)"} <= labels
    records = admin.predict(api_name="/records_load")
    shown = admin.predict(api_name="/admin_load")
    quality, registry = shown[7], shown[9]  # snapshot.SHOWN: "stats", "models_table"
    for name, table in (("records", records[0]), ("audit", records[-1]), ("quality", quality),
                        ("models", registry)):
        assert table["headers"] and not [h for h in table["headers"] if FIELD_NAME.search(h)], (name, table)
    assert "Mean score" in records[0]["headers"] and "Gold accuracy" in quality["headers"]


def _toasts(job) -> list[str]:
    """The gr.Info texts a finished job's server sent (gradio_client keeps them as status updates' logs)."""
    texts = []
    while True:
        try:
            update = job.communicator.updates.get_nowait()
        except asyncio.QueueEmpty:
            return texts
        if getattr(update, "log", None):
            texts.append(update.log[0])


def test_the_undo_toast_names_no_item_id(running_app):
    annotator = Client(running_app.url, auth=running_app.second_annotator, verbose=False)
    key = annotator.predict(api_name="/rate_next")[6]
    item_id = key.split(":")[0]
    annotator.predict(4, "", key, api_name="/rate_submit")
    job = annotator.submit(api_name="/rate_undo")
    job.result()
    toasts = _toasts(job)
    assert toasts == ["Undid your last score: that item is back, rate it again."]
    assert item_id not in toasts[0]


def test_chart_legends_are_words(running_app):
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        run_id = db.execute("INSERT INTO runs (project_id, stage, status, step, total_steps) VALUES (1, 'ppo',"
                            " 'succeeded', 2, 2)").lastrowid
        for step in (1, 2):
            for name, value in (("env/reward_mean", 0.1 * step), ("objective/kl", 0.01 * step)):
                db.execute("INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)",
                           [run_id, step, name, value])
        db.conn.commit()
    finally:
        db.conn.close()
    admin = Client(running_app.url, auth=running_app.admin, verbose=False)
    shown = admin.predict(run_id, api_name="/train_select")
    plot, reward_curve = shown[4], shown[9]  # monitor.REFRESHED: "plot", "reward_curve"
    assert 'data-series="env/reward_mean"' in plot and 'data-series="objective/kl"' in plot
    assert LEGEND.findall(plot) == ["mean reward", "KL"]
    assert LEGEND.findall(reward_curve) == ["mean reward per answer"]
