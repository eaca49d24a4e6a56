"""Report formats: one module per format, one small contract (pip-audit's ``_format/`` shape).

A format module defines ``render(result) -> str`` over :class:`~gapcheck.report.contract.CommandResult`
and nothing else; it only formats. Adding a format is one new module plus one line in :data:`FORMATS`.
:func:`write_report` writes atomically through :func:`gapcheck.atomic.write_atomic` (temp file in the same folder,
fsync, rename), so a cron job never reads half a report. :func:`~gapcheck.atomic.check_writable` is called before any
work starts; both are re-exported here for the report layer's callers.
"""
from __future__ import annotations

import enum
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gapcheck.atomic import check_writable, write_atomic
from gapcheck.errors import UsageError

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult

__all__ = ["FORMATS", "ReportFormat", "Renderer", "check_writable", "render", "renderer", "write_atomic", "write_report"]


class ReportFormat(str, enum.Enum):
    """Every format; CONSOLE renders the terminal report as plain text (e.g. into a log file)."""

    CONSOLE = "console"
    JSON = "json"
    JUNIT = "junit"
    HTML = "html"
    SARIF = "sarif"


#: format -> module implementing ``render(result) -> str``
FORMATS: dict[ReportFormat, str] = {
    ReportFormat.JSON: "gapcheck.report.formats.json_format",
    ReportFormat.JUNIT: "gapcheck.report.formats.junit_format",
    ReportFormat.HTML: "gapcheck.report.formats.html_format",
    ReportFormat.CONSOLE: "gapcheck.report.formats.console_format",
    ReportFormat.SARIF: "gapcheck.report.formats.sarif_format",
}


class Renderer(Protocol):
    def render(self, result: "CommandResult") -> str: ...


def renderer(fmt: ReportFormat) -> Renderer:
    if fmt not in FORMATS:
        raise UsageError(f"report format {fmt.value!r} is not available")
    module: Renderer = importlib.import_module(FORMATS[fmt])
    return module


def render(fmt: ReportFormat, result: "CommandResult") -> str:
    return renderer(fmt).render(result)


def write_report(fmt: ReportFormat, path: str | Path, result: "CommandResult") -> Path:
    return write_atomic(path, render(fmt, result))
