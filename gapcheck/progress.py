"""Progress reporting: the library calls a reporter, only the CLI renders it."""
from __future__ import annotations

from typing import Protocol


class ProgressReporter(Protocol):
    def start(self, description: str, total: int | None) -> None: ...

    def advance(self, steps: int = 1) -> None: ...

    def finish(self) -> None: ...


class NullProgress:
    """The default: reports nowhere."""

    def start(self, description: str, total: int | None) -> None:
        pass

    def advance(self, steps: int = 1) -> None:
        pass

    def finish(self) -> None:
        pass
