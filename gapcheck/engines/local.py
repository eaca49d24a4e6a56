"""The default engine: a process pool on this machine.

Why not a bare ``ProcessPoolExecutor.map``: when one worker dies (OOM killer, a segfault in a
decoder, ``kill -9``) the executor breaks and every shard in flight fails with it. Here the
shards that were in flight become *suspects* and are rerun one at a time on a fresh pool: an
innocent shard then succeeds without being charged an attempt, and only a shard that breaks
the pool while running alone is charged. After ``max_attempts`` it is reported, never dropped.

At most ``2 × workers`` shards are in flight, so the driver holds a bounded number of partials.
Workers ignore SIGINT: Ctrl-C reaches the driver only, which cancels what is queued and
terminates the workers in :meth:`LocalEngine.close`.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from gapcheck.engines.base import DEFAULT_ATTEMPTS, Outcome, Shard, describe_error, is_usage_error

logger = logging.getLogger(__name__)


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def max_workers() -> int:
    """The most worker processes a local pool may start: beyond a few per core they only cost memory, and a
    typo (``workers = 100000``) must not fork a process per shard."""
    return max(64, 4 * (os.cpu_count() or 1))


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalEngine:
    name = "local"

    def __init__(self, workers: int | None = None, max_attempts: int = DEFAULT_ATTEMPTS) -> None:
        if workers is not None and not 1 <= workers <= max_workers():
            from gapcheck.errors import UsageError

            raise UsageError(f"the local engine takes 1 to {max_workers()} workers on this machine, got {workers}")
        self.workers = workers or default_workers()
        self.max_attempts = max(1, max_attempts)
        self._pool: ProcessPoolExecutor | None = None

    def _fresh_pool(self) -> ProcessPoolExecutor:
        self._discard_pool()
        context = multiprocessing.get_context("forkserver")
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=context, initializer=_ignore_sigint)
        return self._pool

    def map_shards(self, fn: Callable[[Any], Any], shards: Sequence[Shard]) -> Iterator[Outcome]:
        pending: deque[Shard] = deque(shards)
        suspects: deque[Shard] = deque()
        attempts: dict[int, int] = {}
        errors: dict[int, str] = {}
        running: dict[Future, Shard] = {}
        pool = self._pool or self._fresh_pool()
        while pending or suspects or running:
            if suspects:
                if not running:  # a suspect runs alone, so a broken pool names exactly one shard
                    pool = self._submit(pool, fn, suspects, running)
            else:
                while pending and len(running) < 2 * self.workers:
                    before = len(pending)
                    pool = self._submit(pool, fn, pending, running)
                    if len(pending) == before:  # the pool broke under shards in flight: handle those first
                        break
            done, _ = wait(tuple(running), return_when=FIRST_COMPLETED)
            broken = False
            for future in done:
                shard = running.pop(future)
                exc = future.exception()
                if exc is None:
                    yield Outcome(shard=shard, partial=future.result(), attempts=attempts.get(shard.index, 0) + 1)
                    continue
                if is_usage_error(exc):
                    raise exc
                if isinstance(exc, BrokenProcessPool):
                    broken = True
                    alone = not running and len(done) == 1
                    if not alone:  # in flight with others: not yet known to be the culprit
                        suspects.append(shard)
                        continue
                    errors[shard.index] = "the worker process died while running this shard"
                else:
                    errors[shard.index] = describe_error(exc)
                attempts[shard.index] = attempts.get(shard.index, 0) + 1
                logger.debug("shard %d failed (attempt %d): %s", shard.index, attempts[shard.index], errors[shard.index])
                if attempts[shard.index] >= self.max_attempts:
                    yield Outcome(shard=shard, error=errors[shard.index], attempts=attempts[shard.index])
                elif broken:
                    suspects.append(shard)
                else:
                    pending.appendleft(shard)
            if broken:
                # Everything else in flight died with the pool: suspects too, uncharged.
                for future, shard in list(running.items()):
                    future.cancel()
                    suspects.append(shard)
                running.clear()
                pool = self._fresh_pool()

    def _submit(self, pool: ProcessPoolExecutor, fn: Callable[[Any], Any], queue: deque[Shard],
                running: dict[Future, Shard]) -> ProcessPoolExecutor:
        """Submit the queue's first shard. A pool that broke between shards (a worker killed while idle) is replaced
        when nothing is in flight; otherwise the shard stays queued until the failing futures are handled."""
        shard = queue[0]
        try:
            future = pool.submit(fn, shard.payload)
        except BrokenProcessPool:
            if running:
                return pool
            pool = self._fresh_pool()
            future = pool.submit(fn, shard.payload)
        queue.popleft()
        running[future] = shard
        return pool

    def _discard_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # a worker stuck in a long shard must not outlive Ctrl-C
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=5)

    def close(self) -> None:
        self._discard_pool()
