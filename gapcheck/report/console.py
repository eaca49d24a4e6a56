"""Shared console helpers: findings and verdict lines every command prints the same way.

Every piece of outside text goes through :func:`~gapcheck.report.text.safe_text` (control
characters neutralized) and rich's ``escape`` (no markup injection) before it reaches the terminal.
"""
from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from gapcheck.findings import Finding, Severity, Verdict
from gapcheck.report.text import clip, safe_line, safe_text

SEVERITY_STYLE = {Severity.GAP: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def clean(text: object) -> str:
    """Outside text made safe for a rich console: control characters neutralized, markup escaped, cut to
    :data:`~gapcheck.report.text.MAX_CONSOLE_CHARS`."""
    return escape(safe_text(clip(str(text))))


def clean_line(text: object) -> str:
    """Like :func:`clean`, on one line (for findings and verdicts: one line each, whatever the text holds)."""
    return escape(safe_line(clip(str(text))))


def make_console(stderr: bool = False) -> Console:
    """A console for reports: the terminal's width, or a wide page when output goes to a file or a pipe."""
    console = Console(emoji=False, stderr=stderr, highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    return console


def print_findings(console: Console, findings: Sequence[Finding]) -> None:
    for finding in findings:
        style = SEVERITY_STYLE[finding.severity]
        where = f" [dim]{clean_line(finding.where)}[/dim]" if finding.where else ""
        console.print(f"[{style}]{finding.severity.value.upper():7}[/{style}] {clean_line(finding.code)}{where}: "
                      f"{clean_line(finding.message)}")


def print_verdict(console: Console, verdict: Verdict | str, summary: str, *, incomplete: bool = False) -> None:
    """The closing line. ``incomplete``: part of the check could not run (exit 3, or exit 2 where an input or an
    endpoint's configuration is wrong and the rest was still checked), so the line says so rather
    than GAP — an endpoint that is down is not a gap in the model."""
    value = Verdict(getattr(verdict, "value", verdict))
    label = "INCOMPLETE" if incomplete else value.value.upper()
    style = "bold green" if value is Verdict.PASS and not incomplete else "bold red"
    console.print(f"[{style}]{label}[/{style}] {clean_line(summary)}")
