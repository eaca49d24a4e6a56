"""Nights over HTTP leave no descriptors behind: gevent keeps an event loop (epoll and wake-up descriptors) for each
thread that used an HTTP client and never frees a finished thread's; nightly's inference workers, audit thread and
endpoint threads free theirs (8 descriptors an endpoint check were leaked, and a test worker that had run the nightly
tests could no longer open a folder under a lowered descriptor limit)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gapcheck.golden.bundle import load_bundle
from tests.nightly.fake_triton import FakeTriton

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd (Linux)")


def _open() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("parallel", [1, 3])
def test_nights_over_http_leave_no_descriptor_behind(tiny_golden: Path, tmp_path: Path, parallel: int) -> None:
    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.history import wait_for_closes

    golden = load_bundle(tiny_golden)
    with FakeTriton(golden) as a, FakeTriton(golden) as b, FakeTriton(golden) as c:
        specs = tuple(endpoint_spec(parse_endpoint_option(f"{n}={f.url}")) for n, f in (("a", a), ("b", b), ("c", c)))

        def night() -> None:
            result = run_nightly(NightlyRequest(golden=tiny_golden, endpoints=specs, history=tmp_path / "h.sqlite",
                                                max_in_flight=4, parallel_endpoints=parallel))
            wait_for_closes()
            assert [e.status.value for e in result.endpoints] == ["pass"] * 3, result.headline

        night()  # the first night makes what lives on (the main thread's hub, imports, the server's handler threads)
        before = _open()
        for _ in range(4):
            night()
        after = _open()
    assert after <= before, (before, after)  # 4 nights x 3 endpoints leaked 8 each before: 96
