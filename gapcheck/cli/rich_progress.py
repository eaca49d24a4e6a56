"""The CLI's rendering of :class:`gapcheck.progress.ProgressReporter` with a rich progress bar."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from gapcheck.report.console import clean


class RichProgress:
    """Each ``start`` opens a new task line; the bar is transient and goes to stderr."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console or Console(emoji=False, stderr=True),
            transient=True,
            disable=not enabled,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> "RichProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, description: str, total: int | None) -> None:
        self.finish()
        self._task = self._progress.add_task(clean(description), total=total)  # descriptions may name user files

    def advance(self, steps: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, steps)

    def finish(self) -> None:
        if self._task is not None:
            self._progress.update(self._task, visible=False)
            self._task = None
