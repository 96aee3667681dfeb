"""Line charts drawn on the server as SVG text, for the Train tab's live plots.

Gradio 6.31's gr.LinePlot compiles its Vega-Lite spec once, when it is first given data: a chart mounted
on an empty frame drew nothing ("Infinite extent for field step"), new series kept the old colour domain,
and unmounting it to rebuild made every other 2 s refresh blank; its legend showed the field's title and no
names. An SVG string replaced whole at every refresh has none of these states: the frame, the axes, one
line per series and a legend naming each series are in every value sent. Pure functions of the points, no
Gradio import, so they are tested with hand-computed numbers.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

# Colour-blind-safe (Okabe-Ito), in the order series are drawn.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MAX_MARKERS = 60  # points drawn as dots too when a line has at most this many (a single point is then visible)


@dataclass(frozen=True)
class Series:
    """One line: its name (its data-series attribute), its (x, y) points in x order, and the words the legend
    shows (`label`; default the name)."""

    name: str
    points: tuple[tuple[float, float], ...]
    label: str = ""

    @property
    def legend(self) -> str:
        return self.label or self.name


def nice_number(value: float, round_it: bool) -> float:
    """1, 2, 5 or 10 times a power of ten, close to `value` (Heckbert, "Nice numbers for graph labels",
    Graphics Gems, 1990): rounded when `round_it`, else the smallest such number >= value."""
    exponent = math.floor(math.log10(value))
    fraction = value / 10**exponent
    if round_it:
        nice = 1 if fraction < 1.5 else 2 if fraction < 3 else 5 if fraction < 7 else 10
    else:
        # The tolerance keeps float noise (1.25 - 1.2 = 0.05000000000000004) from jumping to the next step.
        fraction -= 1e-9
        nice = 1 if fraction <= 1 else 2 if fraction <= 2 else 5 if fraction <= 5 else 10
    return nice * 10**exponent


def nice_ticks(low: float, high: float, count: int = 5, integer: bool = False) -> tuple[list[float], float]:
    """(ticks, step): about `count` round tick values covering [low, high]; whole-number steps when `integer`
    (training steps). A zero-width range is widened to one unit around its value, so a single point still
    gets an axis."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"tick range must be finite, got {low!r}..{high!r}")
    if high < low:
        low, high = high, low
    if high == low:
        low, high = low - 0.5, high + 0.5
    step = nice_number(nice_number(high - low, False) / max(count - 1, 1), True)
    if integer:
        step = max(step, 1.0)
    first, last = math.floor(low / step), math.ceil(high / step)
    return [round(k * step, 12) for k in range(first, last + 1)], step


def tick_label(value: float, step: float) -> str:
    """A tick's text with as many decimals as its step needs (0.25 -> 2, 5 -> 0): no "1.201.25" runs."""
    decimals = next(d for d in range(0, 13) if abs(round(step, d) - step) <= 1e-9 * step)
    text = f"{value:.{decimals}f}"
    return "0" if text.strip("-0.") == "" else text


def line_chart_svg(series: list[Series], title: str = "", x_title: str = "step", width: int = 560,
                   height: int = 240, empty_text: str = "No points yet", x_integer: bool = True) -> str:
    """An SVG line chart: the frame, round ticks on both axes, one polyline per series (dots on short ones)
    and a legend naming each series in its colour. With no points it is the frame and `empty_text`."""
    left, right, top, bottom = 56, 12, 40, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    drawn = [s for s in series if s.points]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="studio-chart" width="100%" viewBox="0 0 {width} {height}"'
             f' role="img" aria-label="{html.escape(title)}" style="max-width:{width}px;font:11px sans-serif">']
    if title:
        parts.append(f'<text class="studio-chart-title" x="{left}" y="14" font-weight="bold" font-size="12">'
                     f'{html.escape(title)}</text>')
    # Legend: one swatch and name per series, in a row under the title.
    x_cursor = left
    for index, s in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        parts.append(f'<g class="studio-chart-legend-item"><rect x="{x_cursor}" y="21" width="12" height="4" '
                     f'fill="{colour}"/><text x="{x_cursor + 16}" y="27">{html.escape(s.legend)}</text></g>')
        x_cursor += 28 + 6 * len(s.legend)
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#bbb"/>')
    if not drawn:
        parts.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" text-anchor="middle" fill="#888">'
                     f'{html.escape(empty_text)}</text></svg>')
        return "".join(parts)
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points if math.isfinite(y)] or [0.0]
    x_ticks, x_step = nice_ticks(min(xs), max(xs), 6, integer=x_integer)
    y_ticks, y_step = nice_ticks(min(ys), max(ys), 5)
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def px(x: float) -> float:
        return round(left + (x - x0) / (x1 - x0) * plot_w, 1)

    def py(y: float) -> float:
        return round(top + plot_h - (y - y0) / (y1 - y0) * plot_h, 1)

    for tick in x_ticks:
        parts.append(f'<line x1="{px(tick)}" y1="{top + plot_h}" x2="{px(tick)}" y2="{top + plot_h + 4}" stroke="#888"/>'
                     f'<text class="studio-chart-xtick" x="{px(tick)}" y="{top + plot_h + 15}" text-anchor="middle">'
                     f'{tick_label(tick, x_step)}</text>')
    for tick in y_ticks:
        parts.append(f'<line x1="{left}" y1="{py(tick)}" x2="{left + plot_w}" y2="{py(tick)}" stroke="#eee"/>'
                     f'<text class="studio-chart-ytick" x="{left - 4}" y="{py(tick) + 4}" text-anchor="end">'
                     f'{tick_label(tick, y_step)}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle" fill="#555">'
                 f'{html.escape(x_title)}</text>')
    for index, s in enumerate(series):
        if not s.points:
            continue
        colour = PALETTE[index % len(PALETTE)]
        points = [(px(x), py(y)) for x, y in s.points if math.isfinite(y)]
        coordinates = " ".join(f"{x},{y}" for x, y in points)
        parts.append(f'<polyline class="studio-chart-line" data-series="{html.escape(s.name)}" fill="none" '
                     f'stroke="{colour}" stroke-width="2" points="{coordinates}"/>')
        if len(points) <= MAX_MARKERS:
            parts.extend(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{colour}"/>' for x, y in points)
    parts.append("</svg>")
    return "".join(parts)


def bar_chart_svg(bars: list[tuple[str, float]], title: str = "", width: int = 560, height: int = 240,
                  percent: bool = False) -> str:
    """Labelled bars from 0 (before/after numbers such as the held-out positive share), each with its value
    written on it; `percent` shows 0.25 as 25%."""
    left, right, top, bottom = 56, 12, 40, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="studio-chart" width="100%" viewBox="0 0 {width} {height}"'
             f' role="img" aria-label="{html.escape(title)}" style="max-width:{width}px;font:11px sans-serif">']
    if title:
        parts.append(f'<text class="studio-chart-title" x="{left}" y="14" font-weight="bold" font-size="12">'
                     f'{html.escape(title)}</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#bbb"/>')
    values = [v for _, v in bars if math.isfinite(v)] or [0.0]
    high = max(max(values), 1.0 if percent else 0.0, 1e-9)
    slot = plot_w / max(len(bars), 1)
    for index, (label, value) in enumerate(bars):
        bar_h = max(value, 0.0) / high * plot_h if math.isfinite(value) else 0.0
        x = left + index * slot + slot * 0.2
        text = f"{value:.0%}" if percent else f"{value:.3g}"
        parts.append(f'<rect class="studio-chart-bar" data-label="{html.escape(label)}" x="{x:.1f}" '
                     f'y="{top + plot_h - bar_h:.1f}" width="{slot * 0.6:.1f}" height="{bar_h:.1f}" '
                     f'fill="{PALETTE[index % len(PALETTE)]}"/>'
                     f'<text x="{x + slot * 0.3:.1f}" y="{top + plot_h - bar_h - 4:.1f}" text-anchor="middle">{text}</text>'
                     f'<text x="{x + slot * 0.3:.1f}" y="{top + plot_h + 15}" text-anchor="middle">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
