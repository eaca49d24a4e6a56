"""`gapcheck history`: read the nightly history; print the runs, or JSON, or write an HTML trend page.

Reading never takes the nightly lock (SQLite WAL lets readers in while a run writes). Exit 0 when
the latest result of every endpoint is good, 1 otherwise, 2 when there is no history to read (or a bad option),
3 when another SQLite writer holds the history locked past ``--lock-wait``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gapcheck.cli.groups import Groups, declare
from gapcheck.errors import UsageError
from gapcheck.groups import ReportTargets, check_number
from gapcheck.nightly.config import DEFAULT_HISTORY, MAX_LOCK_WAIT_S
from gapcheck.nightly.lock import READ_LOCK_WAIT_S

MAX_LAST = 1_000_000  # results per endpoint: far beyond any history, far inside SQLite's 64-bit LIMIT


@declare(ReportTargets, section="nightly")
def command(
    groups: Groups,
    history: Optional[Path] = typer.Option(None, "--history",
        help=f"SQLite history (default: the nightly config section's history, else {DEFAULT_HISTORY})."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="Only this endpoint."),
    # bounded: SQLite's LIMIT takes a 64-bit integer (a bigger one was an OverflowError, exit 3)
    last: int = typer.Option(30, "--last", min=1, max=MAX_LAST, help="Results per endpoint (most recent)."),
    lock_wait: Optional[float] = typer.Option(None, "--lock-wait",
        help=f"Seconds to wait while another SQLite writer holds the history locked, then exit 3 (default "
             f"{READ_LOCK_WAIT_S:g}; [nightly] read_lock_wait_s)."),
) -> None:
    """Show the nightly history: status per run and endpoint, error trends."""
    from rich.console import Console

    from gapcheck.nightly.config import NightlyConfig, resolve_paths
    from gapcheck.nightly.trend import read_history

    check_number(lock_wait, "--lock-wait", high=MAX_LOCK_WAIT_S)
    cfg = groups.config.section("nightly")
    assert isinstance(cfg, NightlyConfig)
    path = history or Path(resolve_paths(cfg, groups.config.source).history or DEFAULT_HISTORY)
    if not path.is_file():
        raise UsageError(f"no history database at {path}", hint="run `gapcheck nightly` first, or pass --history")
    result = read_history(path, endpoint=endpoint, last=last,
                          lock_wait_s=cfg.read_lock_wait_s if lock_wait is None else lock_wait)
    raise typer.Exit(groups[ReportTargets].emit(result, Console(emoji=False, highlight=False)))
