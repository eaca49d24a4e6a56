"""The summary of one stage output on one sample: the shared :func:`gapcheck.tensors.summarize`, with a faster
path for the common case (a float32 output whose channel planes are contiguous, every value finite).

The audit summarizes two or three outputs of every sample, so this is most of its own per-sample work. The
shared function converts every value to float64 (exact to 1e-14, as export-diff needs); here a float32 output
is summed in float32 with numpy's pairwise summation, mean first and then the squared deviations from it
(two passes, so no cancellation): 2-3x faster, and the per-channel mean and standard deviation agree with the
float64 ones to about 1e-7 relative, far below what the report prints or any check reads. Minimum and maximum
are exact, a constant channel has a standard deviation of exactly 0, and the fingerprint is the shared one.
Anything else (other dtypes, NaN or infinity, huge magnitudes, a channel axis that is not leading) takes the
shared function.
"""
from __future__ import annotations

import math

import numpy as np

from gapcheck.tensors import ArraySummary, ChannelStats, fingerprint, summarize

# Squared deviations stay far below float32's limit (3.4e38) for any count numpy can hold below this magnitude.
_FAST_MAX_MAGNITUDE = 1e12


def _planes(arr: np.ndarray, channel_axis: int | None) -> np.ndarray | None:
    """(channels, values) as a view of a C-contiguous array, or None when the planes are not contiguous rows."""
    if not arr.flags.c_contiguous or arr.ndim == 0:
        return None
    if channel_axis is None:
        return arr.reshape(1, -1)
    axis = channel_axis % arr.ndim
    if any(d != 1 for d in arr.shape[:axis]):
        return None  # channels after a real batch axis, or channel-last: the planes interleave
    channels = arr.shape[axis]
    return arr.reshape(channels, -1) if channels else None


def summarize_output(arr: np.ndarray, channel_axis: int | None) -> ArraySummary:
    """The same summary as :func:`gapcheck.tensors.summarize` (see the module docstring for the precision)."""
    planes = _planes(arr, channel_axis) if arr.dtype == np.float32 and arr.size else None
    if planes is None or planes.shape[1] == 0:
        return summarize(arr, channel_axis)
    lows, highs = planes.min(axis=1), planes.max(axis=1)
    if not (np.isfinite(lows).all() and np.isfinite(highs).all()) or \
            max(-float(lows.min()), float(highs.max())) > _FAST_MAX_MAGNITUDE:
        return summarize(arr, channel_axis)  # NaN or infinity (counted and masked there), or huge values
    count = planes.shape[1]
    means = planes.sum(axis=1) / np.float32(count)
    deviations = planes - means[:, None]
    np.square(deviations, out=deviations)
    variances = deviations.sum(axis=1, dtype=np.float32) / np.float32(count)
    rows = []
    for mean, variance, low, high in zip(means.tolist(), variances.tolist(), lows.tolist(), highs.tolist(), strict=True):
        if low == high:  # constant: exactly that value, spread exactly 0
            rows.append(ChannelStats(float(low), 0.0, float(low), float(high)))
        else:
            rows.append(ChannelStats(min(max(float(mean), low), high), math.sqrt(max(variance, 0.0)),
                                     float(low), float(high)))
    return ArraySummary(sha256=fingerprint(arr), shape=tuple(int(d) for d in arr.shape), dtype=str(arr.dtype),
                        min=float(lows.min()), max=float(highs.max()), channels=tuple(rows), nonfinite=0)
