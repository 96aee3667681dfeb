"""Issue 37 item 7: no developer leftovers where people read. Data > Export's options, the Records and Quality
tables' headers and the Train charts' legends are in words (they showed since, include_rating_pairs, zscore,
mean_score broken mid-word, env/reward_mean), and Undo's toast names no item id."""
from __future__ import annotations

import re

import gradio as gr
import pandas as pd
from test_tabs import app, app_db  # noqa: F401 - fixtures

from labeler.services.labels import export
from labeler.services.data.labeling import Undone
from labeler.ui.tabs import labelling
from labeler.ui.tabs.data import export as data_export
from labeler.ui.tabs.train.run_views import metrics_html, reward_curve_html

FIELD_NAME = re.compile(r"^[a-z]+(_[a-z]+)+$|^(since|until|zscore|seed|license|threshold)$")


def test_export_options_and_table_headers_are_in_words(app):
    by_id = {getattr(block, "elem_id", None): block for block in app.blocks.values()}
    with gr.Blocks():
        part = data_export.build_export()
    labels = {name: widget.label for name, widget in part.options.items()}
    assert set(labels) == set(data_export.EXPORT_FIELDS)
    fields = export.ExportOptions.__dataclass_fields__
    assert not [label for label in labels.values() if FIELD_NAME.match(label) or label in fields]
    assert labels["zscore"] == "Standardise each annotator's scores (z-scores)"
    for elem_id in ("records-table", "records-audit"):
        headers = by_id[elem_id].value["headers"]
        assert headers and not [h for h in headers if FIELD_NAME.match(h) or "_" in h], (elem_id, headers)
    quality = [block for block in app.blocks.values() if isinstance(block, gr.Dataframe)
               and getattr(block, "label", "") == "Per annotator"]
    assert quality[0].value["headers"] == ["Annotator", "Ratings", "Rankings", "Skipped", "Gold items",
                                           "Gold accuracy", "Seconds per label"]


def test_chart_legends_are_in_words():
    frame = pd.DataFrame({"step": [1, 2, 1], "name": ["env/reward_mean", "env/reward_mean", "ppo/loss/total"],
                          "value": [0.1, 0.2, 1.0]})
    html = metrics_html(frame, ["env/reward_mean", "ppo/loss/total"])
    legends = re.findall(r'class="studio-chart-legend-item">.*?<text[^>]*>([^<]+)</text>', html)
    assert legends == ["mean reward", "ppo/loss/total"]  # a metric with no plain name keeps its own
    assert 'data-series="env/reward_mean"' in html  # what tests and scripts find it by
    curve = reward_curve_html(pd.DataFrame({"minutes": [1.0, 2.0], "reward": [0.1, 0.2]}))
    assert re.findall(r'class="studio-chart-legend-item">.*?<text[^>]*>([^<]+)</text>', curve) == [
        "mean reward per answer"]


def test_undo_messages_name_no_item_id():
    assert labelling.undo_message(Undone(4711, "label"), "score", "rate") == (
        "Undid your last score: that item is back, rate it again.")
    assert "4711" not in labelling.undo_message(Undone(4711, "skip"), "ranking", "rank")
