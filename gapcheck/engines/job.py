"""Running a job on any engine: shards → partials → merge in shard order → one merged value.

The job hands over a module-level ``task(payload) -> partial`` (picklable, so every engine can
ship it), its shards, an ``empty`` partial and an associative ``merge``. Partials are merged in
shard order whatever order they finish in, so float sums and concatenations come out
bit-identical on every engine; a small reorder buffer holds the partials that finished early.
Shards that kept failing are returned as :class:`ShardFailure` values with their items, for
the job to report. Progress goes through the one :class:`~gapcheck.progress.ProgressReporter`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gapcheck.engines.base import Engine, Shard
from gapcheck.progress import NullProgress, ProgressReporter

P = TypeVar("P")


@dataclass(frozen=True)
class ShardFailure:
    """A shard that kept failing: its index, the items it held (reported, never silently dropped), the last error
    and how many attempts were made."""

    index: int
    items: tuple[str, ...]
    error: str
    attempts: int


@dataclass(frozen=True)
class JobRun(Generic[P]):
    merged: P
    failures: tuple[ShardFailure, ...]
    shards: int
    engine: str


def run_job(engine: Engine, task: Callable[[Any], P], shards: Sequence[Shard], *, empty: Callable[[], P],
            merge: Callable[[P, P], P], progress: ProgressReporter | None = None, description: str = "") -> JobRun[P]:
    """Run ``task`` over ``shards`` on ``engine`` and merge the partials in shard order."""
    reporter = progress or NullProgress()
    reporter.start(description or f"{len(shards)} shard(s) on {engine.name}", len(shards))
    order = sorted(shard.index for shard in shards)
    position = 0
    merged = empty()
    early: dict[int, Any] = {}
    failures: list[ShardFailure] = []
    skip = object()  # a failed shard's place in the order
    try:
        for outcome in engine.map_shards(task, shards):
            reporter.advance(1)
            if outcome.ok:
                early[outcome.shard.index] = outcome.partial
            else:
                early[outcome.shard.index] = skip
                failures.append(ShardFailure(outcome.shard.index, outcome.shard.items, outcome.error or "failed",
                                             outcome.attempts))
            while position < len(order) and order[position] in early:
                partial = early.pop(order[position])
                if partial is not skip:
                    merged = merge(merged, partial)
                position += 1
    finally:
        reporter.finish()
    return JobRun(merged=merged, failures=tuple(sorted(failures, key=lambda f: f.index)), shards=len(shards),
                  engine=engine.name)
