"""Engines for data-heavy jobs: ``serial`` (in process), ``local`` (process pool, the default), ``ray``.

One contract (:class:`~gapcheck.engines.base.Engine`: ``map_shards(fn, shards)`` + ``close``);
jobs run through :func:`~gapcheck.engines.job.run_job` and never know which engine ran them.
The engine is picked by the caller (:class:`gapcheck.groups.EngineSpec`: a flag or the ``[engine]`` config section,
:mod:`gapcheck.engines.config`), never by a job.
Use :func:`open_engine` as a context manager so Ctrl-C and errors always shut workers down.
"""
from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import Any

from gapcheck.engines.base import DEFAULT_ATTEMPTS, Engine, Outcome, Shard
from gapcheck.engines.job import JobRun, ShardFailure, run_job

__all__ = ["Engine", "EngineKind", "JobRun", "Outcome", "Shard", "ShardFailure", "make_engine", "open_engine",
           "run_job"]


class EngineKind(str, enum.Enum):
    serial = "serial"
    local = "local"
    ray = "ray"


def make_engine(kind: EngineKind | str = EngineKind.local, *, workers: int | None = None, address: str | None = None,
                max_attempts: int = DEFAULT_ATTEMPTS) -> Engine:
    from gapcheck.errors import UsageError

    try:
        kind = EngineKind(kind)
    except ValueError:
        raise UsageError(f"unknown engine {kind!r}; choose one of: {', '.join(k.value for k in EngineKind)}") from None
    if address is not None and kind is not EngineKind.ray:
        raise UsageError(f"an engine address is only used by the ray engine, not {kind.value}")
    if kind is EngineKind.serial:
        from gapcheck.engines.serial import SerialEngine
        return SerialEngine(max_attempts=max_attempts)
    if kind is EngineKind.local:
        from gapcheck.engines.local import LocalEngine
        return LocalEngine(workers=workers, max_attempts=max_attempts)
    from gapcheck.engines.ray_engine import RayEngine
    return RayEngine(address=address, workers=workers, max_attempts=max_attempts)


@contextlib.contextmanager
def open_engine(kind: EngineKind | str = EngineKind.local, **options: Any) -> Iterator[Engine]:
    engine = make_engine(kind, **options)
    try:
        yield engine
    finally:
        engine.close()
