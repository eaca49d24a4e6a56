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
from gapcheck.report.contract import Chart, Table
from gapcheck.report.text import format_value

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult

_RENDER_WIDTH = 160


def shown_rows(table: Table, max_rows: int | None) -> list[int]:
    """Row indices to print: all, or at most ``max_rows`` with the highlighted rows first (kept in table order)."""
    count = len(table.rows)
    if not max_rows or max_rows <= 0 or count <= max_rows:
        return list(range(count))
    chosen = list(dict.fromkeys([i for i in table.highlight if 0 <= i < count][:max_rows]))
    for index in range(count):
        if len(chosen) >= max_rows:
            break
        if index not in chosen:
            chosen.append(index)
    return sorted(chosen)


def _cell(value: Any) -> str:
    return clean(value if isinstance(value, str) else format_value(value))


def print_table(console: Console, table: Table, max_rows: int | None = None) -> None:
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
        console.print(f"[dim]({len(table.rows) - len(rows)} more rows in the JSON and HTML reports)[/dim]")


def print_result(console: Console, result: "CommandResult", *, max_rows: int | None = None) -> None:
    """Tables, then a line per chart (drawn in the HTML report), then findings and the verdict."""
    charts: list[str] = []
    for view in result.views():
        if isinstance(view, Table):
            print_table(console, view, max_rows)
        elif isinstance(view, Chart):
            charts.append(view.title)
    if charts:
        console.print(f"[dim]charts in the HTML report: {clean('; '.join(charts))}[/dim]")
    print_findings(console, list(result.findings))
    print_verdict(console, result.verdict, result.headline,
                  incomplete=getattr(result, "exit_code", None) == ExitCode.BACKEND)


def render(result: "CommandResult", *, max_rows: int | None = None) -> str:
    """The console report as plain text (no colour codes): for files, pipes and tests."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=_RENDER_WIDTH, highlight=False, soft_wrap=False, color_system=None,
                      force_terminal=False)
    print_result(console, result, max_rows=max_rows)
    return buffer.getvalue()


__all__: Sequence[str] = ("print_result", "print_table", "render", "shown_rows")
