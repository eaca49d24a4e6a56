"""Self-contained HTML reports: one file, plots inlined as base64 PNG, every value escaped (jinja2 autoescape)."""
from __future__ import annotations

import base64
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import numpy as np

if TYPE_CHECKING:
    from gapcheck.preprocess.result import PreprocessAuditResult

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gapcheck {{ command }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222} table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left} .gap{color:#b00020;font-weight:bold}
.warning{color:#b26a00} .info{color:#0a6} .pass{color:#0a0;font-weight:bold} .differs{background:#fde2e2}
img{max-width:100%} code{font-size:12px}
</style></head><body>
<h1>gapcheck {{ command }}: <span class="{{ 'pass' if verdict == 'pass' else 'gap' }}">{{ verdict|upper }}</span></h1>
<p>{{ summary }}</p>
<h2>Stages</h2>
<table><tr><th>stage</th><th>description</th><th>shape</th><th>dtype</th><th>range</th>{% for c in channel_headers %}<th>{{ c }}</th>{% endfor %}<th>resize</th><th>samples</th></tr>
{% for row in stage_rows %}<tr>{% for cell in row %}<td class="{{ 'differs' if cell.differs else '' }}">{{ cell.text }}</td>{% endfor %}</tr>
{% endfor %}</table>
<h2>Findings</h2>
{% if findings %}<table><tr><th>severity</th><th>code</th><th>where</th><th>message</th><th>evidence</th></tr>
{% for f in findings %}<tr><td class="{{ f.severity }}">{{ f.severity }}</td><td>{{ f.code }}</td><td>{{ f.where }}</td><td>{{ f.message }}</td><td><code>{{ f.evidence }}</code></td></tr>
{% endfor %}</table>{% else %}<p>No findings.</p>{% endif %}
<h2>Stage pairs</h2>
<table><tr><th>pair</th><th>samples</th><th>max |&Delta;|</th><th>min PSNR dB</th><th>mean PSNR dB</th><th>status</th></tr>
{% for p in pairs %}<tr>{% for cell in p %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}</table>
{% if ks %}<h2>Kolmogorov&ndash;Smirnov per channel</h2>
<table><tr><th>pair</th><th>channel</th><th>D (effect)</th><th>p-value</th><th>mean diff (SD)</th><th>flagged</th></tr>
{% for k in ks %}<tr>{% for cell in k %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}</table>{% endif %}
{% if histograms %}<h2>Per-channel histograms</h2>{% for h in histograms %}<h3>{{ h.title }}</h3><img alt="{{ h.title }}" src="data:image/png;base64,{{ h.png }}">{% endfor %}{% endif %}
{% if worst %}<h2>Worst samples</h2>{% for w in worst %}<h3>{{ w.title }}</h3><img alt="{{ w.title }}" src="data:image/png;base64,{{ w.png }}">{% endfor %}{% endif %}
{% if bad %}<h2>Bad inputs and stage errors</h2><table><tr><th>sample</th><th>what</th><th>detail</th></tr>
{% for b in bad %}<tr><td>{{ b[0] }}</td><td>{{ b[1] }}</td><td>{{ b[2] }}</td></tr>{% endfor %}</table>{% endif %}
</body></html>
"""


def _environment() -> jinja2.Environment:
    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)


def png_base64(figure: Any) -> str:
    """A matplotlib figure as base64 PNG (the figure is closed)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)  # headless, no display needed
    import matplotlib.pyplot as plt

    return plt


def _fmt(value: float) -> str:
    return "inf" if value == math.inf else "-inf" if value == -math.inf else "nan" if math.isnan(value) else f"{value:.4g}"


def _histograms(result: "PreprocessAuditResult") -> list[dict[str, str]]:
    plt = _pyplot()
    out = []
    channels = max((v.shape[0] for v in result.channel_values.values()), default=0)
    for channel in range(channels):
        fig, ax = plt.subplots(figsize=(6, 2.6))
        for stage, values in result.channel_values.items():
            if channel < values.shape[0]:
                data = values[channel][np.isfinite(values[channel])]
                if data.size:
                    ax.hist(data, bins=64, histtype="step", label=stage, density=True)
        ax.set_title(f"channel {channel}")
        ax.legend(fontsize=7)
        out.append({"title": f"channel {channel}", "png": png_base64(fig)})
    return out


def _worst(result: "PreprocessAuditResult") -> list[dict[str, str]]:
    plt = _pyplot()
    out = []
    for w in result.worst_samples:
        panels = 3 if w.diff is not None else 2
        fig, axes = plt.subplots(1, panels, figsize=(3.2 * panels, 3.2))
        for ax, image, title in zip(axes, (w.ref_image, w.cand_image), (w.ref, w.cand), strict=False):
            ax.imshow(image, cmap="gray" if image.ndim == 2 else None)
            ax.set_title(title, fontsize=9)
            ax.axis("off")
        if w.diff is not None:
            shown = axes[2].imshow(w.diff, cmap="inferno")
            axes[2].set_title("|Δ| (canonical CHW)", fontsize=9)
            axes[2].axis("off")
            fig.colorbar(shown, ax=axes[2], fraction=0.046)
        title = f"{w.cand} vs {w.ref} on {Path(w.sample).name}: max |Δ| {_fmt(w.max_abs)}, PSNR {_fmt(w.psnr_db)} dB"
        out.append({"title": title, "png": png_base64(fig)})
    return out


def render_preprocess_html(result: "PreprocessAuditResult") -> str:
    ref = result.stages[0]
    channels = max((len(r.channel_mean) for r in result.stages), default=0)
    rows = []
    for row in result.stages:
        cells = [{"text": row.stage + (" (augmented)" if row.augmented else ""), "differs": False},
                 {"text": row.description, "differs": False},
                 {"text": ", ".join(row.shapes), "differs": row.shapes != ref.shapes},
                 {"text": ", ".join(row.dtypes), "differs": row.dtypes != ref.dtypes},
                 {"text": f"[{_fmt(row.min)}, {_fmt(row.max)}]", "differs": (row.min, row.max) != (ref.min, ref.max)}]
        for i in range(channels):
            if i < len(row.channel_mean):
                differs = i >= len(ref.channel_mean) or abs(row.channel_mean[i] - ref.channel_mean[i]) > 1e-3 \
                    or abs(row.channel_std[i] - ref.channel_std[i]) > 1e-3
                cells.append({"text": f"{row.channel_mean[i]:.3f} / {row.channel_std[i]:.3f}", "differs": differs})
            else:
                cells.append({"text": "", "differs": True})
        cells.append({"text": row.resize_method, "differs": row.resize_method != ref.resize_method})
        cells.append({"text": f"{row.ok_samples} ok, {row.failed_samples} failed", "differs": bool(row.failed_samples)})
        rows.append(cells)
    context = {
        "command": "preprocess-audit",
        "verdict": result.verdict,
        "summary": result.summary,
        "channel_headers": [f"c{i} mean / std" for i in range(channels)],
        "stage_rows": rows,
        "findings": [{"severity": f.severity.value, "code": f.code, "where": f.where, "message": f.message,
                      "evidence": f.evidence} for f in result.findings],
        "pairs": [(f"{p.ref} vs {p.cand}", f"{p.comparable_samples}/{p.compared_samples}", _fmt(p.max_abs),
                   _fmt(p.min_psnr_db), _fmt(p.mean_psnr_db), "within tolerance" if p.within_tolerance else p.note or "differs")
                  for p in result.pairs],
        "ks": [(f"{k.cand_stage} vs {k.ref_stage}", k.channel, f"{k.statistic:.3f}", f"{k.p_value:.3g}",
                f"{k.mean_difference_sd:.3f}", "yes" if k.flagged else "no") for k in result.ks],
        "histograms": _histograms(result),
        "worst": _worst(result),
        "bad": [(b.path, b.code, b.detail) for b in result.bad_samples]
        + [(e.sample, f"stage_error in {e.stage}", e.error) for e in result.stage_errors],
    }
    return _environment().from_string(_TEMPLATE).render(**context)


def write_preprocess_html(path: str | Path, result: "PreprocessAuditResult") -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_preprocess_html(result), encoding="utf-8")
    return target
