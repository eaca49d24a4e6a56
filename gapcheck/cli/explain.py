"""``gapcheck explain CODE`` / ``gapcheck explain --list``: the finding-code registry, read aloud."""
from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from gapcheck.codes import all_codes, lookup
from gapcheck.errors import UsageError
from gapcheck.report.console import make_console


def command(
    code: str = typer.Argument(None, help="A finding code, e.g. layer_divergence or GC101."),
    list_all: bool = typer.Option(False, "--list", help="List every registered code."),
) -> None:
    """Explain a finding code: what it means and the usual fix."""
    console = make_console()
    if list_all or not code:
        table = Table("code", "severity", "family", "title", title="gapcheck finding codes")
        for entry in all_codes():
            table.add_row(entry.code, entry.severity.value, entry.family, escape(entry.title))
        console.print(table)
        return
    found = lookup(code)
    if found is None:
        raise UsageError(f"unknown finding code: {code!r}", hint="gapcheck explain --list shows every code")
    entry = found
    console.print(f"[bold]{entry.code}[/bold] ({entry.severity.value}, {entry.family}): {escape(entry.title)}\n")
    console.print(escape(entry.explanation) + "\n")
    console.print(f"[bold]Fix:[/bold] {escape(entry.fix)}")
