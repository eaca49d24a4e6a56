"""Console: the result's tables, its findings and the verdict line, drawn with rich.

Charts are for the HTML report; the console names them so nobody wonders where they went.
Every cell and message from outside passes :func:`gapcheck.report.console.clean`.
"""
from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table as RichTable

from gapcheck.errors import ExitCode
from gapcheck.report.console import clean, print_findings, print_verdict
from gapcheck.report.contract import CONSOLE_MAX_ROWS, Chart, Table, more_rows_note
from gapcheck.report.contract import shown_rows as _shown
from gapcheck.report.text import format_value

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult

_RENDER_WIDTH = 160


def shown_rows(table: Table, max_rows: int | None) -> list[int]:
    """Row indices to print: all, or at most ``max_rows`` with the highlighted rows first (kept in table order)."""
    return _shown(len(table.rows), table.highlight, max_rows)


def _limit(max_rows: int | None) -> int:
    """None (a library caller that says nothing): the console's default bound; 0: every row."""
    return CONSOLE_MAX_ROWS if max_rows is None else max(int(max_rows), 0)


def _cell(value: Any) -> str:
    return clean(value if isinstance(value, str) else format_value(value))


def print_table(console: Console, table: Table, max_rows: int | None = None) -> None:
    """``table`` with at most ``max_rows`` rows (None: the default bound; 0: all) and a line saying what was left out."""
    max_rows = _limit(max_rows)
    rich_table = RichTable(title=clean(table.title), show_lines=False, expand=False)
    for column in table.columns:
        rich_table.add_column(clean(column), overflow="fold")
    marked = set(table.highlight)
    rows = shown_rows(table, max_rows)
    for index in rows:
        rich_table.add_row(*(_cell(c) for c in table.rows[index]), style="bold red" if index in marked else None)
    console.print(rich_table)
    if table.note:
        console.print(f"[dim]{clean(table.note)}[/dim]")
    if len(rows) < len(table.rows):
        console.print(f"[dim]{clean(hidden_note(len(table.rows) - len(rows), 'rows', max_rows))}[/dim]")


def hidden_note(hidden: int, what: str, max_rows: int | None) -> str:
    return more_rows_note(hidden, what, f"--max-rows {max_rows}; --max-rows 0 shows all")


def print_result(console: Console, result: "CommandResult", *, max_rows: int | None = None) -> None:
    """Tables, then a line per chart (drawn in the HTML report), then findings and the verdict. ``max_rows`` bounds
    each table and the findings (None: :data:`~gapcheck.report.contract.CONSOLE_MAX_ROWS`; 0: all)."""
    max_rows = _limit(max_rows)
    charts: list[str] = []
    for view in result.views():
        if isinstance(view, Table):
            print_table(console, view, max_rows)
        elif isinstance(view, Chart):
            charts.append(view.title)
    if charts:
        console.print(f"[dim]charts in the HTML report: {clean('; '.join(charts))}[/dim]")
    findings = list(result.findings)
    shown = _shown(len(findings), [i for i, f in enumerate(findings) if f.is_gap], max_rows)
    print_findings(console, [findings[i] for i in shown])
    if len(shown) < len(findings):
        console.print(f"[dim]{clean(hidden_note(len(findings) - len(shown), 'findings', max_rows))}[/dim]")
    print_verdict(console, result.verdict, result.headline,
                  incomplete=getattr(result, "exit_code", None) in (ExitCode.BACKEND, ExitCode.USAGE))


def render(result: "CommandResult", *, max_rows: int | None = None) -> str:
    """The console report as plain text (no colour codes): for files, pipes and tests; ``max_rows`` as in
    :func:`print_result`."""
    buffer = io.StringIO()
    console = Console(emoji=False, file=buffer, width=_RENDER_WIDTH, highlight=False, soft_wrap=False, color_system=None,
                      force_terminal=False)
    print_result(console, result, max_rows=max_rows)
    return buffer.getvalue()


__all__: Sequence[str] = ("hidden_note", "print_result", "print_table", "render", "shown_rows")
