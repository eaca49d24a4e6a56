"""One endpoint's total deadline, carried by every connection made to it.

:class:`gapcheck.triton.client.TritonConnection` bounds each *attempt* by the endpoint's ``timeout_s``
(gRPC's own deadline, a gevent timer for HTTP) and retries transient failures, so one call may take
``(retries + 1) * timeout_s``; a night's readiness checks, audit and inference make many calls. A server
that accepts connections and never answers would hold one endpoint far past ``--deadline``.

Here every attempt runs with ``min(timeout_s, time left)`` as its timeout, and no attempt starts once the
deadline has passed: the whole endpoint ends within the deadline plus one retry pause (2 s at most).
The deadline travels on the endpoint value, so every connection made from it (readiness, the audit's
own, one per inference worker) keeps it without being told.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from gapcheck.errors import EndpointError
from gapcheck.triton.client import TritonConnection
from gapcheck.triton.endpoint import TritonEndpoint

T = TypeVar("T")


class DeadlinePassed(EndpointError):
    """The endpoint's total deadline passed before the request could start (never retried)."""


def deadline_message(deadline_s: float) -> str:
    return f"the endpoint's total deadline of {deadline_s:g}s passed"


@dataclass(frozen=True, repr=False)  # repr=False keeps TritonEndpoint's redacted repr
class DeadlineEndpoint(TritonEndpoint):
    """A :class:`TritonEndpoint` whose connections stop at ``deadline`` (a ``time.monotonic()`` value)."""

    deadline: float = float("inf")
    deadline_s: float = 0.0  # the deadline as the user gave it, for messages
    # A threading.Event: once set, no further attempt starts (the golden bundle failed its verification while this
    # endpoint was being checked: its answers can no longer matter). An attempt already in flight ends on its timeout.
    cancelled: Any = field(default=None, compare=False)

    @classmethod
    def of(cls, endpoint: TritonEndpoint, deadline: float, deadline_s: float,
           cancelled: Any = None) -> DeadlineEndpoint:
        values = {f.name: getattr(endpoint, f.name) for f in fields(TritonEndpoint)}
        return cls(**values, deadline=deadline, deadline_s=deadline_s, cancelled=cancelled)

    def time_left(self, last_error: str = "") -> float:
        """Seconds left; DeadlinePassed when none are (each probe of :meth:`resolve` and each connection's attempt
        is capped at this, and none starts after it)."""
        if self.cancelled is not None and self.cancelled.is_set():
            raise DeadlinePassed("the check was cancelled (the golden bundle failed its verification)")
        left = self.deadline - time.monotonic()
        if left <= 0:
            detail = f" ({last_error})" if last_error else ""
            # The caller's message names the endpoint.
            raise DeadlinePassed(deadline_message(self.deadline_s) + detail)
        return left

    def connect(self, *, backoff_s: float = 0.2) -> TritonConnection:
        return DeadlineConnection(self, backoff_s=backoff_s)


class DeadlineConnection(TritonConnection):
    """A connection whose every attempt is capped at the time left to its :class:`DeadlineEndpoint`."""

    def __init__(self, endpoint: DeadlineEndpoint, *, backoff_s: float = 0.2) -> None:
        self._bound = endpoint
        super().__init__(endpoint, backoff_s=backoff_s)

    def _within_deadline(self, fn: Callable[[], T]) -> T:
        # The one place every attempt passes through: TritonConnection.call's retries, the HTTP timer and
        # gRPC's client_timeout (read when the request is made, inside fn) all take self.timeout_s from here.
        # DeadlinePassed is no OSError, so call() does not retry it and names it in its one-line error.
        self.timeout_s = min(self._attempt_timeout_s, self._bound.time_left())
        return super()._within_deadline(fn)
