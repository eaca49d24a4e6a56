"""Exception families and the one table that maps them to exit codes.

Every command raises a subclass of :class:`GapcheckError`; the CLI boundary
(``gapcheck.cli.app.main``) is the only place that turns them into exit codes.
"""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    NO_GAP = 0
    GAP_FOUND = 1
    USAGE = 2  # usage, configuration or input error
    BACKEND = 3  # a backend or endpoint failed


class GapcheckError(Exception):
    """Base of every error gapcheck raises on purpose."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

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


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code for any exception reaching the CLI boundary."""
    if isinstance(exc, GapcheckError):
        return exc.exit_code
    # Anything unexpected is a failure of gapcheck or a backend, never a "pass".
    return ExitCode.BACKEND
