"""The Train tab's SVG charts (labeler/ui/charts.py): round ticks worked by hand, labels that never run
together, and a chart that always has its frame, its legend names and one line per series."""
from __future__ import annotations

import re

import pytest

from labeler.ui.charts import Series, line_chart_svg, nice_number, nice_ticks, tick_label


def test_nice_numbers_by_hand():
    # 0.05 is already 5 x 10^-2 (float noise: 1.25 - 1.2 = 0.05000000000000004 must not become 0.1).
    assert nice_number(1.25 - 1.2, False) == pytest.approx(0.05)
    # 0.0125 rounds to 1 x 10^-2; 3.7 rounds to 5; 7.2 rounds up to 10.
    assert nice_number(0.0125, True) == pytest.approx(0.01)
    assert nice_number(3.7, True) == 5 and nice_number(7.2, True) == 10


def test_ticks_by_hand():
    # The reward curve: 1.20..1.25 -> range 0.05, step 0.05 / 4 = 0.0125 -> 0.01: six ticks.
    ticks, step = nice_ticks(1.2, 1.25)
    assert step == pytest.approx(0.01) and ticks == pytest.approx([1.20, 1.21, 1.22, 1.23, 1.24, 1.25])
    assert [tick_label(t, step) for t in ticks] == ["1.20", "1.21", "1.22", "1.23", "1.24", "1.25"]
    # 0..97 in 6 ticks: range 100, 100 / 5 = 20.
    assert nice_ticks(0, 97, 6) == ([0, 20, 40, 60, 80, 100], 20)
    # Training steps 1..3: half steps are not steps.
    assert nice_ticks(1, 3, 6, integer=True) == ([1, 2, 3], 1)
    # One point: the range is widened to 2.5..3.5, step 1 / 4 = 0.25 -> 0.2.
    ticks, step = nice_ticks(3, 3)
    assert step == pytest.approx(0.2) and ticks[0] == pytest.approx(2.4) and ticks[-1] == pytest.approx(3.6)
    assert tick_label(0.25, 0.25) == "0.25" and tick_label(-0.0, 0.5) == "0" and tick_label(40, 20) == "40"


def test_chart_has_a_line_per_series_and_a_legend_naming_them():
    svg = line_chart_svg([Series("env/reward_mean", ((1, 0.5), (2, 1.0), (3, 1.5))),
                          Series("objective/kl", ((1, 0.0), (2, 0.1)))], title="PPO")
    lines = re.findall(r'<polyline class="studio-chart-line" data-series="([^"]+)"[^>]* points="([^"]+)"', svg)
    assert [(name, len(points.split())) for name, points in lines] == [("env/reward_mean", 3), ("objective/kl", 2)]
    legend = re.findall(r'<g class="studio-chart-legend-item">.*?<text[^>]*>([^<]+)</text></g>', svg)
    assert legend == ["env/reward_mean", "objective/kl"]
    # Plot area x: 56..548 for steps 1..3 (step 1 at 56, step 3 at 548); y ticks 0..1.5 span 200..40, so
    # reward 0.5 is at 200 - 0.5 / 1.5 * 160 = 146.7 and 1.5 at 40; kl 0.0 is at 200, step 2 at (56 + 548) / 2.
    assert lines[0][1].split() == ["56.0,146.7", "302.0,93.3", "548.0,40.0"]
    assert lines[1][1].split() == ["56.0,200.0", "302.0,189.3"]
    x_labels = re.findall(r'class="studio-chart-xtick"[^>]*>([^<]+)<', svg)
    assert x_labels == ["1", "2", "3"]


def test_an_empty_chart_is_a_frame_with_a_message_not_nothing():
    svg = line_chart_svg([Series("loss", ())], title="Loss")
    assert "No points yet" in svg and "<polyline" not in svg and ">loss<" in svg
