"""The Ray engine: each shard is a Ray task on a local Ray (``ray.init()``) or a cluster (``address``).

Ray retries a task whose worker died (``max_retries``) and, with ``retry_exceptions``, one that
raised; a shard still failing after that comes back as an :class:`Outcome` with its error. The
payload is a small description (paths, row ranges): workers read the data themselves, so raw
bytes never pass through the driver, and partials are small values in the object store. At most
``2 × cluster CPUs`` tasks are in flight. Ray is optional: without it, asking for this engine is
a :class:`~gapcheck.errors.UsageError` that says what to install.
"""
from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gapcheck.engines.base import DEFAULT_ATTEMPTS, Outcome, Shard, describe_error, is_usage_error
from gapcheck.errors import BackendError, UsageError

logger = logging.getLogger(__name__)


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise UsageError("the ray engine needs Ray: pip install gapcheck[ray]") from exc
    return ray


class RayEngine:
    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None,
                 max_attempts: int = DEFAULT_ATTEMPTS) -> None:
        self.ray = import_ray()
        self.max_attempts = max(1, max_attempts)
        self._started_here = False
        if not self.ray.is_initialized():
            self._start(address, workers)
            self._started_here = True
        self.workers = max(1, int(self.ray.cluster_resources().get("CPU", 1)))

    def _start(self, address: str | None, workers: int | None) -> None:
        """``ray.init``: its warnings come back one safe line each, and the address is shown without credentials."""
        from gapcheck.report.text import safe_line
        from gapcheck.triton.url import redact, secrets_in

        # RAY_ADDRESS (used when no address is given) may hold credentials too, and Ray quotes it in its warnings.
        secrets = tuple(sorted(set(secrets_in(address or "", None) + secrets_in(os.environ.get("RAY_ADDRESS", ""), None)),
                               key=len, reverse=True))
        failure: Exception | None = None
        # Ray warns with raw multi-line text (a site-packages path, its own advice) before it raises: caught here
        # so that the terminal sees one neutralized line per warning, through the CLI's log handler.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                # RAY_ADDRESS in the environment is honoured by ray.init() when address is None; a local Ray
                # is started (with ``workers`` CPUs) only when neither names a cluster.
                local = address is None and not os.environ.get("RAY_ADDRESS")
                self.ray.init(address=address, num_cpus=workers if local else None,
                              include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            except Exception as exc:  # noqa: BLE001 - Ray raises many types for an unreachable cluster
                failure = exc
        for warning in caught:
            logger.warning("Ray: %s", safe_line(redact(str(warning.message), secrets)))
        if failure is not None:
            where = f" at {redact(address, secrets)}" if address else ""
            raise BackendError(safe_line(redact(f"could not start or reach Ray{where}: {describe_error(failure)}",
                                                secrets))) from None

    def map_shards(self, fn: Callable[[Any], Any], shards: Sequence[Shard]) -> Iterator[Outcome]:
        ray = self.ray
        task = ray.remote(fn).options(max_retries=self.max_attempts - 1, retry_exceptions=True, num_cpus=1)
        queue = list(reversed(shards))
        running: dict[Any, Shard] = {}
        try:
            while queue or running:
                while queue and len(running) < 2 * self.workers:
                    shard = queue.pop()
                    running[task.remote(shard.payload)] = shard
                done, _ = ray.wait(list(running), num_returns=1)
                for ref in done:
                    shard = running.pop(ref)
                    try:
                        partial = ray.get(ref)
                    except (KeyboardInterrupt, SystemExit):
                        raise
                    except Exception as exc:  # noqa: BLE001 - reported with the shard's items
                        cause = getattr(exc, "cause", None) or exc
                        if is_usage_error(cause):
                            raise cause from None
                        yield Outcome(shard=shard, error=describe_error(cause), attempts=self.max_attempts)
                        continue
                    yield Outcome(shard=shard, partial=partial)
        except BaseException:
            for ref in running:
                ray.cancel(ref, force=True)
            raise

    def close(self) -> None:
        if self._started_here and self.ray.is_initialized():
            self.ray.shutdown()
            self._started_here = False
