"""Draw a :class:`~gapcheck.report.contract.Chart` with matplotlib (Agg, headless) as a base64 PNG.

Only the HTML format calls this; matplotlib is imported on the first chart, never by ``import gapcheck``.
The chart says what to draw (series, marks, matrix, images); this module only draws it.

Chart text comes from outside (endpoint, layer and feature names): every string reaches matplotlib through
:func:`_text`, and every warning matplotlib gives while drawing is emitted again through
:func:`gapcheck.report.text.safe_line` (its glyph warnings quote the character raw: an ESC or BEL would reach
the terminal).
"""
from __future__ import annotations

import base64
import io
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gapcheck.report.contract import Chart, Series
from gapcheck.report.text import safe_line

_MAX_TICK_LABELS = 40
# Past these, matplotlib takes minutes (100k bar rectangles: 56 s; 2,000 marks: 7 s; a tick label per heatmap column):
# more bars are drawn as one filled step line, further marks are counted in a corner, tick labels are thinned.
_MAX_BARS = 500
_MAX_MARKS = 20
_MAX_LEGEND = 30  # more series than this: no legend (a thousand names in one box are not read, and take seconds)
_STYLE_LINES = {"line": "-", "dashed": "--", "step": "-"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)  # headless, no display needed
    import matplotlib.pyplot as plt

    return plt


def png_base64(figure: Any) -> str:
    """A matplotlib figure as base64 PNG (the figure is closed)."""
    plt = _pyplot()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def draw(chart: Chart) -> list[str]:
    """Base64 PNGs for ``chart`` (one, or none for an "images" chart whose images are already PNGs)."""
    if chart.kind == "images":
        return [png for _, png in chart.images]
    with safe_warnings():
        return [_heatmap(chart) if chart.kind == "heatmap" else _series_chart(chart)]


@contextmanager
def safe_warnings() -> Iterator[None]:
    """Warnings given inside are caught and emitted again, in order, with their message through ``safe_line``
    (same category; control characters as escapes, one line), also when the body raises."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # all recorded here; the filters in force outside decide what shows
            yield
    finally:  # outside the recording block: inside it, they would only be recorded again
        for warning in caught:
            warnings.warn(safe_line(warning.message), warning.category, stacklevel=3)


def _text(value: object) -> str:
    """Outside text as matplotlib should draw it: control characters as escapes (matplotlib draws them as missing
    glyphs and warns with the raw character), each ``$`` literal (a pair is otherwise parsed as mathtext: a name
    holding ``$\\frac$`` failed the whole report, and ``$5 and $6`` was drawn in italics)."""
    return safe_line(value).replace("$", r"\$")


def _values(series: Series, log_y: bool) -> list[float]:
    """None leaves a gap (NaN breaks a matplotlib line); on a log axis non-positive values are gaps too."""
    out = []
    for v in series.values:
        if v is None or (isinstance(v, float) and math.isnan(v)) or (log_y and v <= 0):
            out.append(math.nan)
        else:
            out.append(float(v))
    return out


def _series_chart(chart: Chart) -> str:
    plt = _pyplot()
    width = min(16.0, max(6.0, 0.12 * len(chart.x)))
    fig, ax = plt.subplots(figsize=(width, 3.6))
    positions = list(range(len(chart.x)))
    bars = [i for i, s in enumerate(chart.series) if s.style == "bar" or chart.kind == "bar"]
    bar_width = 0.8 / max(1, len(bars))
    for number, series in enumerate(chart.series):
        values = _values(series, chart.log_y)
        if number in bars and len(positions) > _MAX_BARS:
            ax.fill_between(positions, 0, values, step="mid", alpha=0.5, label=_text(series.name))
        elif number in bars:
            offset = (bars.index(number) - (len(bars) - 1) / 2) * bar_width
            ax.bar([p + offset for p in positions], values, width=bar_width, label=_text(series.name))
        elif series.style == "scatter":
            ax.scatter(positions, values, s=12, label=_text(series.name))
        elif series.style == "step":
            ax.step(positions, values, where="mid", linestyle="--", linewidth=1, label=_text(series.name))
        else:
            ax.plot(positions, values, _STYLE_LINES.get(series.style, "-"), marker="." if len(positions) <= 80 else None,
                    linewidth=1.2, label=_text(series.name))
    _marks(ax, chart, len(positions))
    if chart.log_y:
        ax.set_yscale("log")
    ax.set_ylabel(_text(chart.y_label))
    _ticks(ax.set_xticks, ax.set_xticklabels, chart.x[: len(positions)], rotation=90)
    ax.set_title(_text(chart.title), fontsize=10)
    if 0 < len(chart.series) <= _MAX_LEGEND:  # "best" searches every point for a free corner: slow on 100k points
        ax.legend(fontsize=7, loc="best" if len(positions) <= 1000 else "upper right")
    return png_base64(fig)


def _ticks(set_ticks: Any, set_labels: Any, labels: Any, rotation: int = 0) -> None:
    """At most :data:`_MAX_TICK_LABELS` evenly spaced labels."""
    step = max(1, math.ceil(len(labels) / _MAX_TICK_LABELS))
    set_ticks(range(0, len(labels), step))
    set_labels([_text(x) for x in labels[::step]], rotation=rotation, fontsize=7)


def _marks(ax: Any, chart: Chart, count: int) -> None:
    """The first :data:`_MAX_MARKS` marks as labelled lines; how many more, in a corner."""
    marks = [i for i in chart.marks if 0 <= i < count]
    for index in marks[:_MAX_MARKS]:
        ax.axvline(index, color="#b00020", linewidth=1, linestyle=":")
        ax.annotate(_text(chart.x[index]), (index, 0.02), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                    color="#b00020", ha="right", va="bottom")
    if len(marks) > _MAX_MARKS:
        ax.text(0.99, 0.98, f"+{len(marks) - _MAX_MARKS:,} more marked", transform=ax.transAxes, ha="right", va="top",
                fontsize=7, color="#b00020")


def _heatmap(chart: Chart) -> str:
    plt = _pyplot()
    rows = len(chart.matrix)
    cols = max((len(r) for r in chart.matrix), default=0)
    fig, ax = plt.subplots(figsize=(min(16.0, max(4.0, 0.4 * cols + 2)), min(12.0, max(2.5, 0.35 * rows + 1.5))))
    grid = [[(math.nan if v is None else float(v)) for v in row] + [math.nan] * (cols - len(row)) for row in chart.matrix]
    shown = ax.imshow(grid, aspect="auto", cmap="viridis")
    fig.colorbar(shown, ax=ax, fraction=0.046)
    _ticks(ax.set_xticks, ax.set_xticklabels, chart.x[:cols], rotation=90)
    _ticks(ax.set_yticks, ax.set_yticklabels, chart.y[:rows])
    ax.set_title(_text(chart.title), fontsize=10)
    return png_base64(fig)
