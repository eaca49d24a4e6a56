"""Draw a :class:`~gapcheck.report.contract.Chart` with matplotlib (Agg, headless) as a base64 PNG.

Only the HTML format calls this; matplotlib is imported on the first chart, never by ``import gapcheck``.
The chart says what to draw (series, marks, matrix, images); this module only draws it.
"""
from __future__ import annotations

import base64
import io
import math
from typing import Any

from gapcheck.report.contract import Chart, Series

_MAX_TICK_LABELS = 40
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
    if chart.kind == "heatmap":
        return [_heatmap(chart)]
    return [_series_chart(chart)]


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
        if number in bars:
            offset = (bars.index(number) - (len(bars) - 1) / 2) * bar_width
            ax.bar([p + offset for p in positions], values, width=bar_width, label=series.name)
        elif series.style == "scatter":
            ax.scatter(positions, values, s=12, label=series.name)
        elif series.style == "step":
            ax.step(positions, values, where="mid", linestyle="--", linewidth=1, label=series.name)
        else:
            ax.plot(positions, values, _STYLE_LINES.get(series.style, "-"), marker="." if len(positions) <= 80 else None,
                    linewidth=1.2, label=series.name)
    for index in chart.marks:
        if 0 <= index < len(positions):
            ax.axvline(index, color="#b00020", linewidth=1, linestyle=":")
            ax.annotate(chart.x[index], (index, 0.02), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        color="#b00020", ha="right", va="bottom")
    if chart.log_y:
        ax.set_yscale("log")
    ax.set_ylabel(chart.y_label)
    step = max(1, math.ceil(len(positions) / _MAX_TICK_LABELS))
    ax.set_xticks(positions[::step])
    ax.set_xticklabels(chart.x[::step], rotation=90, fontsize=7)
    ax.set_title(chart.title, fontsize=10)
    if chart.series:
        ax.legend(fontsize=7)
    return png_base64(fig)


def _heatmap(chart: Chart) -> str:
    plt = _pyplot()
    rows = len(chart.matrix)
    cols = max((len(r) for r in chart.matrix), default=0)
    fig, ax = plt.subplots(figsize=(min(16.0, max(4.0, 0.4 * cols + 2)), min(12.0, max(2.5, 0.35 * rows + 1.5))))
    grid = [[(math.nan if v is None else float(v)) for v in row] + [math.nan] * (cols - len(row)) for row in chart.matrix]
    shown = ax.imshow(grid, aspect="auto", cmap="viridis")
    fig.colorbar(shown, ax=ax, fraction=0.046)
    ax.set_xticks(range(cols))
    ax.set_xticklabels(chart.x[:cols], rotation=90, fontsize=7)
    ax.set_yticks(range(rows))
    ax.set_yticklabels(chart.y[:rows], fontsize=7)
    ax.set_title(chart.title, fontsize=10)
    return png_base64(fig)
