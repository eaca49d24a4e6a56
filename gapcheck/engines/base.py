"""The one engine contract: run a function over shards, yield each shard's partial (or its failure).

A heavy job is *shards of work items → a small mergeable partial per shard → an associative
merge → findings*. Engines only run ``fn(shard.payload)`` somewhere (this process, a process
pool, a Ray cluster) and hand back :class:`Outcome` values as shards finish, in any order; the
job runner (:mod:`gapcheck.engines.job`) merges them in shard order, so the answer never depends
on which engine ran it or when a shard finished.

Faults are the engine's business: a shard whose worker dies or raises is retried up to
``max_attempts`` times; a shard that keeps failing comes back as an :class:`Outcome` with
``error`` set and its items named, never dropped. A usage error raised by a task
(:func:`is_usage_error`) is not a fault: it is raised to the caller at once. This module imports nothing heavy.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_ATTEMPTS = 3


@dataclass(frozen=True)
class Shard:
    """One unit of work: ``payload`` goes to the worker (small: paths and row ranges, never raw bytes);
    ``items`` names what the shard covers, for the report when it keeps failing."""

    index: int
    payload: Any
    items: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """What came back for one shard: its partial, or (after every retry) the last error."""

    shard: Shard
    partial: Any = None
    error: str | None = None
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None


class Engine(Protocol):
    name: str

    def map_shards(self, fn: Callable[[Any], Any], shards: Sequence[Shard]) -> Iterator[Outcome]:
        """Run ``fn`` on every shard's payload; yield one :class:`Outcome` per shard as it finishes."""
        ...

    def close(self) -> None:
        """Stop workers and release resources (safe to call twice, and on Ctrl-C)."""
        ...


def is_usage_error(exc: BaseException) -> bool:
    """A usage/config/input error raised by a task (e.g. a column that does not exist): the same on every retry and
    every shard, so it is raised to the caller at once (exit 2) instead of being retried and reported per shard."""
    from gapcheck.errors import ExitCode, GapcheckError

    return isinstance(exc, GapcheckError) and exc.exit_code is ExitCode.USAGE


def describe_error(exc: BaseException) -> str:
    """One line for a shard's failure (no traceback: tracebacks go to --debug logs)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
