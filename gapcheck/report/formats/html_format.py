"""HTML: one self-contained page for any command's result.

Headline and verdict, the findings (evidence as labelled values), then every view the result
exposes: a :class:`~gapcheck.report.contract.Table` as an HTML table with its highlighted rows, a
:class:`~gapcheck.report.contract.Chart` as an inline base64 PNG. Every value is escaped by
jinja2's autoescape; nothing is fetched from the network when the page is opened. Each table and the findings
hold at most :data:`~gapcheck.report.contract.HTML_MAX_ROWS` rows (the failing ones first, then a note saying how
many more): 100k rows would be a page no browser scrolls; the JSON report holds every row.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gapcheck.report.contract import HTML_MAX_ROWS, Chart, Table, more_rows_note, shown_rows
from gapcheck.report.text import clip, evidence_items, format_value, safe_text
from gapcheck.version import __version__

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult

_MAX_CHARS = 10_000

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gapcheck {{ command }}: {{ verdict }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:.6em 0 1.4em} td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;
text-align:left;vertical-align:top} th{background:#f4f4f4} tr.hl td{background:#fde2e2}
.gap{color:#b00020;font-weight:bold} .warning{color:#b26a00} .info{color:#0a6} .pass{color:#0a0;font-weight:bold}
dl{margin:0;display:grid;grid-template-columns:max-content auto;gap:0 .8em} dt{color:#555} dd{margin:0}
img{max-width:100%} .figures{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start} figure{margin:0}
figcaption{font-size:12px;color:#555} .note{color:#555;font-size:13px} .timings{color:#777;font-size:12px}
</style></head><body>
<h1>gapcheck {{ command }}: <span class="{{ 'pass' if verdict == 'pass' else 'gap' }}">{{ verdict|upper }}</span></h1>
<p>{{ headline }}</p>
<h2>Findings</h2>
{% if findings %}<table><tr><th>severity</th><th>code</th><th>where</th><th>message</th><th>evidence</th></tr>
{% for f in findings %}<tr><td class="{{ f.severity }}">{{ f.severity }}</td><td>{{ f.code }}</td><td>{{ f.where }}</td>
<td>{{ f.message }}</td><td>{% if f.evidence %}<dl>{% for label, value in f.evidence %}<dt>{{ label }}</dt><dd>{{ value }}</dd>{% endfor %}</dl>{% endif %}</td></tr>
{% endfor %}</table>{% if findings_note %}<p class="note">{{ findings_note }}</p>{% endif %}{% else %}<p>No findings.</p>{% endif %}
{% for view in views %}<h2>{{ view.title }}</h2>
{% if view.kind == "table" %}<table><tr>{% for c in view.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in view.rows %}<tr{% if row.hl %} class="hl"{% endif %}>{% for cell in row.cells %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% else %}<div class="figures">{% for image in view.images %}<figure><img alt="{{ view.title }}" src="data:image/png;base64,{{ image.png }}">
{% if image.caption %}<figcaption>{{ image.caption }}</figcaption>{% endif %}</figure>{% endfor %}</div>{% endif %}
{% if view.note %}<p class="note">{{ view.note }}</p>{% endif %}
{% if view.hidden %}<p class="note">{{ view.hidden }}</p>{% endif %}
{% endfor %}
{% if timings %}<p class="timings">timings: {% for name, seconds in timings %}{{ name }} {{ seconds }} s{% if not loop.last %} · {% endif %}{% endfor %}</p>{% endif %}
<p class="timings">gapcheck {{ version }}</p>
</body></html>
"""


def _environment() -> Any:
    import jinja2

    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, finalize=safe_text)  # no raw ESC


def _clip(value: Any) -> str:
    """One cell's text, cut at :data:`_MAX_CHARS` (a server's 10 MB message must not make a 10 GB page)."""
    return clip(value if isinstance(value, str) else format_value(value), _MAX_CHARS)


def _hidden(total: int, shown: int, what: str, max_rows: int) -> str:
    return more_rows_note(total - shown, what, f"an HTML report holds {max_rows:,}, the failing ones first") \
        if shown < total else ""


def _table(view: Table, max_rows: int) -> dict[str, Any]:
    marked = set(view.highlight)
    shown = shown_rows(len(view.rows), view.highlight, max_rows)
    rows = [{"cells": [_clip(c) for c in view.rows[i]], "hl": i in marked} for i in shown]
    return {"kind": "table", "title": view.title, "columns": view.columns, "rows": rows, "note": view.note,
            "hidden": _hidden(len(view.rows), len(shown), "rows", max_rows)}


def _chart(view: Chart) -> dict[str, Any]:
    from gapcheck.report.charts import draw

    if view.kind == "images":
        images = [{"png": png, "caption": caption} for caption, png in view.images]
    else:
        images = [{"png": png, "caption": ""} for png in draw(view)]
    return {"kind": "chart", "title": view.title, "images": images, "note": view.note, "hidden": ""}


def render(result: "CommandResult", *, max_rows: int = HTML_MAX_ROWS) -> str:
    """The page; each table and the findings hold at most ``max_rows`` rows (0: all), the failing ones first."""
    every = list(result.findings)
    shown = shown_rows(len(every), [i for i, f in enumerate(every) if f.is_gap], max_rows)
    findings = [{"severity": f.severity.value, "code": f.code, "where": _clip(f.where), "message": _clip(f.message),
                 "evidence": [(label, _clip(value)) for label, value in evidence_items(f.evidence)]}
                for f in (every[i] for i in shown)]
    views = [_table(v, max_rows) if isinstance(v, Table) else _chart(v) for v in result.views()]
    page: str = _environment().from_string(_TEMPLATE).render(
        command=result.command, verdict=result.verdict.value, headline=result.headline, findings=findings,
        findings_note=_hidden(len(every), len(shown), "findings", max_rows),
        views=views, timings=[(name, f"{seconds:.2f}") for name, seconds in result.timings.items()],
        version=__version__,
    )
    return page
