"""One connection used by several threads at once (nightly's readiness asks metadata and config beside the model's
readiness; every inference worker sends on one gRPC channel): each thread's attempt keeps its own timeout."""
from __future__ import annotations

import threading
import time

from gapcheck.nightly.deadline import DeadlineEndpoint
from gapcheck.triton.client import TritonEndpoint, connect


def test_each_thread_caps_its_own_attempt() -> None:
    conn = connect(TritonEndpoint("grpc://127.0.0.1:1", timeout_s=30.0))
    try:
        capped = threading.Event()
        seen: list[float] = []

        def other() -> None:
            conn.timeout_s = 0.5  # this thread's attempt, capped near a deadline
            capped.set()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert capped.is_set()
        seen.append(conn.timeout_s)  # this thread never capped one: the endpoint's own
        assert seen == [30.0]
        assert conn._kw()["client_timeout"] == 30.0
    finally:
        conn.close()


def test_a_deadline_connection_caps_each_thread_at_the_time_left() -> None:
    endpoint = DeadlineEndpoint.of(TritonEndpoint("grpc://127.0.0.1:1", timeout_s=30.0),
                                   time.monotonic() + 5.0, 5.0)
    conn = endpoint.connect()
    try:
        caps: dict[str, float] = {}

        def attempt(name: str) -> None:
            caps[name] = conn._within_deadline(lambda: conn._kw()["client_timeout"])

        threads = [threading.Thread(target=attempt, args=(str(i),)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(caps) == 4 and all(0 < cap <= 5.0 for cap in caps.values()), caps
        assert conn.timeout_s == 30.0  # the main thread made no attempt: nothing capped its own
    finally:
        conn.close()
