"""Exception families and the one table that maps them to exit codes.

Every command raises a subclass of :class:`GapcheckError`; the CLI boundary
(``gapcheck.cli.app.main``) is the only place that turns them into exit codes.
"""
from __future__ import annotations

import re
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gapcheck.findings import Verdict


class ExitCode(IntEnum):
    NO_GAP = 0
    GAP_FOUND = 1
    USAGE = 2  # usage, configuration or input error
    BACKEND = 3  # a backend or endpoint failed

    @classmethod
    def for_verdict(cls, verdict: "Verdict | str") -> "ExitCode":
        """The one verdict -> exit code line: 0 for a pass, 1 for a gap."""
        return cls.NO_GAP if str(getattr(verdict, "value", verdict)) == "pass" else cls.GAP_FOUND


class GapcheckError(Exception):
    """Base of every error gapcheck raises on purpose.

    Messages speak library terms. ``parameter`` names the API parameter the problem is about
    (e.g. ``"unsafe_pickle"``); the CLI turns it into its flag (``--unsafe-pickle``), so the
    library never names a flag and a Python caller never reads one.
    """

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, *, hint: str | None = None, parameter: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.parameter = parameter

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


class UsageError(GapcheckError):
    """The command line or the Python call asks for something inconsistent."""


class ConfigError(GapcheckError):
    """gapcheck.toml / [tool.gapcheck] is malformed or names something missing."""


class InputError(GapcheckError):
    """A file or value given as input cannot be used (missing, corrupt, wrong shape)."""


class CheckpointError(InputError):
    """A checkpoint cannot be loaded safely or does not fit the model."""


class ExportError(GapcheckError):
    """The model could not be exported to ONNX (the exporter's own error, condensed)."""


class BackendError(GapcheckError):
    """A backend (ONNX Runtime, torch, Triton) failed to run."""

    exit_code = ExitCode.BACKEND


class EndpointError(BackendError):
    """A remote endpoint (e.g. a Triton server) is unreachable, not ready or answered an error."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: the dynamo exporter's long report states the fact under this heading
_EXCEPTION_SUMMARY = re.compile(r"## Exception summary\s+(.+?)(?:\n\n|$)", re.S)
#: a DataLoader worker's error reads "Caught X in DataLoader worker process 0." + a traceback: the last line is the fact
_WORKER_ERROR = re.compile(r"^Caught \w+ in DataLoader worker")


def one_line(exc: BaseException, *, limit: int = 300, whole: bool = False) -> str:
    """``Type: the first meaningful line of the message``, the one-line summary every message uses.

    torch's and ONNX's messages run long and continue with advice; the first sentence of a long
    first line is the fact, the rest is cut at ``limit`` characters. A DataLoader worker's wrapped error
    gives its last line (the original message). ``whole=True`` keeps every line, joined by spaces (an
    exporter's error spreads the fact over several lines; the dynamo exporter's "Exception summary" is kept
    when there is one). ANSI colour codes are removed either way.
    """
    text = _ANSI.sub("", str(exc)).strip()
    if whole:
        summary = _EXCEPTION_SUMMARY.search(text)
        text = " ".join((summary.group(1) if summary else text).split())
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        text = lines[0] if lines else ""
        if _WORKER_ERROR.match(text):  # the last line reads "ValueError: the original message"
            text = lines[-1].removeprefix(f"{type(exc).__name__}: ")
        if len(text) > 160 and ". " in text:
            text = text.split(". ", 1)[0]
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def condense_error(exc: BaseException, limit: int = 400) -> str:
    """An exporter's or runtime's error on one line, every line of it kept (:func:`one_line` with ``whole=True``)."""
    return one_line(exc, limit=limit, whole=True)


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code for any exception reaching the CLI boundary."""
    if isinstance(exc, GapcheckError):
        return exc.exit_code
    # Anything unexpected is a failure of gapcheck or a backend, never a "pass".
    return ExitCode.BACKEND
