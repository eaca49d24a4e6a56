"""Report formats: one module per format, one small contract (pip-audit's ``_format/`` shape).

A format module defines ``render(result) -> str`` over :class:`~gapcheck.report.contract.CommandResult`
and nothing else; it only formats. Adding a format is one new module plus one line in :data:`FORMATS`.
:func:`write_report` writes atomically (temp file in the same folder, fsync, rename), so a cron job
never reads half a report. :func:`check_writable` is called before any work starts.
"""
from __future__ import annotations

import enum
import importlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gapcheck.errors import UsageError

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult


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


def check_writable(path: str | Path, what: str = "report", *, probe: bool = True) -> Path:
    """Fail early (UsageError, exit 2) when ``path`` cannot be written: a directory, under a file, an unwritable folder,
    or a path the atomic rename must not replace (a symbolic link, a device, a FIFO)."""
    target = Path(path)
    if target.is_symlink():  # the rename would replace the link (or, followed, write where someone else points it)
        raise UsageError(f"{what} path {target} is a symbolic link; give the file's real path")
    if target.is_dir():
        raise UsageError(f"{what} path {target} is a directory")
    if target.exists() and not target.is_file():  # a device, FIFO or socket: the rename would replace it
        raise UsageError(f"{what} path {target} is not a regular file")
    parent = target.parent if str(target.parent) else Path(".")
    for folder in (parent, *parent.parents):
        if folder.exists():
            if not folder.is_dir():
                raise UsageError(f"{what} path {target}: {folder} is not a directory")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise UsageError(f"{what} path {target}: {folder} is not writable")
            if probe and folder == parent:
                _probe_folder(folder, target, what)
            break
    return target


def _probe_folder(folder: Path, target: Path, what: str) -> None:
    """Create and remove a file where the report will go: os.access says yes for root on /proc or a read-only mount."""
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=folder)
    except OSError as exc:
        raise UsageError(f"{what} path {target}: cannot create a file in {folder} ({exc.strerror})") from None
    os.close(fd)
    Path(probe).unlink(missing_ok=True)


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, fsync, rename)."""
    target = check_writable(path, probe=False)  # the temp file made next is the probe
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), 0o666 & ~_umask())  # mkstemp makes 0600; a report is as readable as any file
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _umask() -> int:
    mask = os.umask(0)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


def write_report(fmt: ReportFormat, path: str | Path, result: "CommandResult") -> Path:
    return write_atomic(path, render(fmt, result))
