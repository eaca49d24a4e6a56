"""The in-process engine: shards run one after another in this process (debugging, tiny inputs, tests)."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from gapcheck.engines.base import DEFAULT_ATTEMPTS, Outcome, Shard, describe_error, is_usage_error

logger = logging.getLogger(__name__)


class SerialEngine:
    name = "serial"

    def __init__(self, max_attempts: int = DEFAULT_ATTEMPTS) -> None:
        self.max_attempts = max(1, max_attempts)
        self.workers = 1

    def map_shards(self, fn: Callable[[Any], Any], shards: Sequence[Shard]) -> Iterator[Outcome]:
        for shard in shards:
            error = ""
            for attempt in range(1, self.max_attempts + 1):
                try:
                    partial = fn(shard.payload)
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception as exc:  # noqa: BLE001 - a shard's failure is reported, not raised
                    if is_usage_error(exc):
                        raise
                    error = describe_error(exc)
                    logger.debug("shard %d attempt %d failed", shard.index, attempt, exc_info=True)
                    continue
                yield Outcome(shard=shard, partial=partial, attempts=attempt)
                break
            else:
                yield Outcome(shard=shard, error=error, attempts=self.max_attempts)

    def close(self) -> None:
        pass
