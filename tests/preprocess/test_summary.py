"""The audit's per-output summary (``preprocess.summary``) against the shared ``tensors.summarize``."""
from __future__ import annotations

import math

import numpy as np
import pytest

from gapcheck.preprocess.summary import summarize_output
from gapcheck.tensors import summarize

RNG = np.random.default_rng(0)
CASES = [
    ("chw float32", RNG.normal(size=(3, 64, 64)).astype(np.float32), 0),
    ("batched", (RNG.normal(size=(1, 3, 16, 16)) * 1e5 + 7).astype(np.float32), 1),
    ("channel-last (shared path)", RNG.normal(size=(16, 16, 3)).astype(np.float32), 2),
    ("no channel axis", RNG.normal(size=(5,)).astype(np.float32), None),
    ("huge values (shared path)", (RNG.normal(size=(3, 20, 20)) * 1e13).astype(np.float32), 0),
    ("uint8 (shared path)", np.arange(12, dtype=np.uint8).reshape(3, 2, 2), 0),
    ("float64 (shared path)", RNG.normal(size=(3, 8, 8)), 0),
    ("empty", np.zeros((3, 0, 4), np.float32), 0),
]


@pytest.mark.parametrize(("array", "axis"), [(a, x) for _, a, x in CASES], ids=[name for name, _, _ in CASES])
def test_same_summary_as_the_shared_one(array, axis):
    shared, fast = summarize(array, axis), summarize_output(array, axis)
    assert (fast.sha256, fast.shape, fast.dtype, fast.nonfinite) == (shared.sha256, shared.shape, shared.dtype,
                                                                      shared.nonfinite)
    assert len(fast.channels) == len(shared.channels)
    for ours, theirs in zip(fast.channels, shared.channels, strict=True):
        assert (ours.min, ours.max) == (theirs.min, theirs.max) or math.isnan(theirs.min)  # exact
        for a, b in ((ours.mean, theirs.mean), (ours.std, theirs.std)):
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-6, abs=1e-6 * theirs.std)


def test_constant_channel_is_exact_and_nan_is_counted():
    constant = np.full((3, 8, 8), 0.3, np.float32)
    constant[1] = -2.1
    stats = summarize_output(constant, 0).channels
    assert [(c.mean, c.std) for c in stats] == [(float(np.float32(v)), 0.0) for v in (0.3, -2.1, 0.3)]
    with_nan = RNG.normal(size=(3, 4, 4)).astype(np.float32)
    with_nan[0, 0, 0] = np.nan
    assert summarize_output(with_nan, 0) == summarize(with_nan, 0)  # masked statistics, nonfinite counted
    assert summarize_output(with_nan, 0).nonfinite == 1


def test_means_stay_within_the_channel_range():
    near_constant = np.full((1, 1000), 1.0, np.float32)
    near_constant[0, ::7] = np.nextafter(np.float32(1.0), np.float32(2.0))
    (channel,) = summarize_output(near_constant, 0).channels
    assert channel.min <= channel.mean <= channel.max and channel.std >= 0
