"""Shared console helpers: findings and verdict lines every command prints the same way."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from gapcheck.findings import Finding, Severity

SEVERITY_STYLE = {Severity.GAP: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def make_console(stderr: bool = False) -> Console:
    """A console for reports: the terminal's width, or a wide page when output goes to a file or a pipe."""
    console = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    return console


def print_findings(console: Console, findings: list[Finding] | tuple[Finding, ...]) -> None:
    for finding in findings:
        style = SEVERITY_STYLE[finding.severity]
        where = f" [dim]{escape(finding.where)}[/dim]" if finding.where else ""
        console.print(f"[{style}]{finding.severity.value.upper():7}[/{style}] {finding.code}{where}: {escape(finding.message)}")


def print_verdict(console: Console, verdict: str, summary: str) -> None:
    style = "bold green" if verdict == "pass" else "bold red"
    console.print(f"[{style}]{verdict.upper()}[/{style}] {escape(summary)}")
