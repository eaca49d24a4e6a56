"""`gapcheck history`: read the nightly history; print the runs, or JSON, or write an HTML trend page.

Reading never takes the nightly lock (SQLite WAL lets readers in while a run writes). Exit 0 when
the latest result of every endpoint is good, 1 otherwise, 2 when there is no history to read.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gapcheck.errors import UsageError
from gapcheck.nightly.config import DEFAULT_HISTORY


def command(
    history: Optional[Path] = typer.Option(None, "--history",
        help=f"SQLite history (default: the nightly config section's history, else {DEFAULT_HISTORY})."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="Only this endpoint."),
    last: int = typer.Option(30, "--last", min=1, help="Results per endpoint (most recent)."),
    json_path: Optional[str] = typer.Option(None, "--json", metavar="PATH",
        help="Write the runs as a JSON report here, as every command does ('-': print it on stdout)."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML page with the trends."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here (a case per run)."),
    config: Optional[Path] = typer.Option(None, "--config", help="gapcheck.toml or pyproject.toml (default: discovered)."),
    max_rows: int = typer.Option(0, "--max-rows", min=0, help="Rows of the runs table (0: all)."),
) -> None:
    """Show the nightly history: status per run and endpoint, error trends."""
    from rich.console import Console

    from gapcheck.errors import ExitCode
    from gapcheck.nightly.config import load_nightly_config
    from gapcheck.nightly.trend import read_history
    from gapcheck.report.formats import ReportFormat, check_writable, render, write_report
    from gapcheck.report.formats.console_format import print_result

    json_file = Path(json_path) if json_path not in (None, "-") else None
    for report_path in (html_path, junit_path, json_file):
        if report_path is not None:
            check_writable(report_path)
    path = history or Path(load_nightly_config(config).history or DEFAULT_HISTORY)
    if not path.is_file():
        raise UsageError(f"no history database at {path}", hint="run `gapcheck nightly` first, or pass --history")
    result = read_history(path, endpoint=endpoint, last=last)
    if json_path == "-":  # the report is the output: no table around it
        typer.echo(render(ReportFormat.JSON, result), nl=False)
    else:
        print_result(Console(highlight=False), result, max_rows=max_rows or None)
    if json_file is not None:
        write_report(ReportFormat.JSON, json_file, result)
    if html_path is not None:
        write_report(ReportFormat.HTML, html_path, result)
    if junit_path is not None:
        write_report(ReportFormat.JUNIT, junit_path, result)
    raise typer.Exit(ExitCode.NO_GAP if result.verdict.value == "pass" else ExitCode.GAP_FOUND)
