"""One endpoint's check: the vectorized per-sample comparison, and deadlines on a server that never answers."""
from __future__ import annotations

import time
from pathlib import Path

import pytest


def test_vectorized_per_sample_stats_match_compare_arrays() -> None:
    import numpy as np

    from gapcheck.compare import Tolerance, compare_arrays
    from gapcheck.nightly.probe import per_sample_stats

    rng = np.random.default_rng(0)
    golden = rng.standard_normal((9, 3, 5)).astype(np.float32)
    golden[2, 0, 0] = 0.0
    served = golden + rng.standard_normal(golden.shape).astype(np.float32) * np.float32(1e-4)
    served[4] += 0.01  # a failing sample
    served[2, 0, 0] = 1e-6  # error where the reference is 0: max_rel is inf
    stats = per_sample_stats(served, golden, 1e-4, 1e-4)
    for i in range(9):
        ref = compare_arrays(served[i:i + 1], golden[i:i + 1], Tolerance(1e-4, 1e-4))
        got = [float(s[i]) for s in stats[:5]] + [bool(stats[5][i])]
        assert got[5] == ref.passed
        assert np.allclose(got[:5], [ref.max_abs, ref.max_rel, ref.mean_abs, ref.mismatch_fraction, ref.error_ratio],
                           rtol=1e-6, equal_nan=True)
    served[1, 1, 1] = np.nan
    assert per_sample_stats(served, golden, 1e-4, 1e-4) is None  # non-finite: compared sample by sample


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_a_server_that_never_answers_is_unreachable_within_the_deadline(tiny_golden: Path, tmp_path: Path,
                                                                        scheme: str) -> None:
    import socket

    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option

    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        spec = endpoint_spec(parse_endpoint_option(f"hung={scheme}://127.0.0.1:{silent.getsockname()[1]}/m",
                                                   timeout_s=1.0))
        start = time.monotonic()
        result = run_nightly(NightlyRequest(golden=tiny_golden, endpoints=(spec,), history=tmp_path / "h.sqlite",
                                            retries=0, deadline_s=5.0))
        elapsed = time.monotonic() - start
    assert result.exit_code == 3 and result.endpoints[0].status.value == "unreachable"
    assert elapsed < 30, elapsed
