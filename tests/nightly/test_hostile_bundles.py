"""Tampered golden bundles against nightly (issue 23, attacker pass 5): refused at once, and never a digest of
bytes that were not sent."""
from __future__ import annotations

import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from gapcheck.errors import InputError
from gapcheck.groups import TritonTarget


def _tampered_reference(tiny_golden: Path, tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_golden, bundle)
    target = bundle / "reference_torch.safetensors"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0x01  # one bit: the SHA256 in the manifest no longer matches
    target.write_bytes(bytes(data))
    return bundle


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_a_bad_bundle_ends_a_hung_first_endpoint_at_once(tiny_golden: Path, tmp_path: Path, scheme: str) -> None:
    """The first endpoint accepts and never answers (a 60 s deadline, 30 s per attempt): the bundle's error is
    raised as soon as the hashes are done, not after the endpoint's deadline (it was: 60 s, then exit 2)."""
    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option

    bundle = _tampered_reference(tiny_golden, tmp_path)
    history = tmp_path / "h.sqlite"
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        spec = endpoint_spec(parse_endpoint_option(f"hung={scheme}://127.0.0.1:{silent.getsockname()[1]}/m",
                                                   timeout_s=30.0))
        start = time.monotonic()
        with pytest.raises(InputError, match="reference_torch.safetensors"):
            run_nightly(NightlyRequest(golden=bundle, endpoints=(spec,), history=history,
                                       target=TritonTarget(retries=1, deadline_s=60.0), audit=False))
        elapsed = time.monotonic() - start
    assert elapsed < 20, elapsed  # the hashes of a 12-sample bundle; the deadline was the whole 60 s
    assert not history.exists()  # nothing recorded


def test_a_cancelled_endpoint_starts_no_further_attempt() -> None:
    from gapcheck.nightly.deadline import DeadlineEndpoint, DeadlinePassed
    from gapcheck.triton.endpoint import TritonEndpoint

    cancelled = threading.Event()
    endpoint = DeadlineEndpoint.of(TritonEndpoint(url="http://127.0.0.1:1"), time.monotonic() + 600, 600.0, cancelled)
    assert endpoint.time_left() > 500
    cancelled.set()
    with pytest.raises(DeadlinePassed, match="cancelled"):
        endpoint.time_left()
