"""Canonical tensor fingerprints and per-channel statistics.

The same fingerprint function is used by every command, so a hash printed by
``export-diff`` can be compared with one printed by ``preprocess-audit``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np


def to_numpy(value: Any) -> np.ndarray:
    """Convert a torch tensor, numpy array or array-like to a numpy array (no copy when possible)."""
    if isinstance(value, np.ndarray):
        return value
    # Imported lazily only to keep numpy-only callers (e.g. the Triton test server) free of torch.
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency of the package
        return np.asarray(value)
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return tensor.numpy()
    return np.asarray(value)


def contiguous(array: Any, dtype: Any = None) -> np.ndarray:
    """A C-contiguous array of ``array``'s own rank (``np.ascontiguousarray`` turns a scalar into shape (1,))."""
    arr = np.asarray(array, dtype=dtype)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _canonical(array: Any) -> tuple[bytes, np.ndarray]:
    """The header (dtype, shape) and a C-contiguous little-endian view of ``array``."""
    arr = to_numpy(array)
    dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    arr = contiguous(arr, dtype=dtype)
    header = f"{arr.dtype.str}|{','.join(str(d) for d in arr.shape)}|".encode()
    return header, arr


def canonical_bytes(array: Any) -> bytes:
    """Header (dtype, shape) + C-contiguous little-endian bytes of ``array``."""
    header, arr = _canonical(array)
    return header + arr.tobytes(order="C")


def fingerprint(array: Any) -> str:
    """SHA256 hex digest of :func:`canonical_bytes`; equal iff dtype, shape and values are equal."""
    header, arr = _canonical(array)
    digest = hashlib.sha256(header)
    if arr.size:
        digest.update(memoryview(arr).cast("B"))  # type: ignore[arg-type]  # numpy arrays are buffers
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ChannelStats:
    """Statistics of one channel of an array."""

    mean: float
    std: float
    min: float
    max: float


@dataclass(frozen=True)
class ArraySummary:
    """What a person checks first when two stages disagree: dtype, shape, range, per-channel stats."""

    sha256: str
    shape: tuple[int, ...]
    dtype: str
    min: float
    max: float
    channels: tuple[ChannelStats, ...]
    nonfinite: int


def _planes(arr: np.ndarray, channel_axis: int | None) -> np.ndarray:
    """(channels, values) of ``arr``, a view where numpy can make one (HWC gives a strided view, not a copy: the
    blocks of :func:`_one_pass` gather it into cache); one row when ``channel_axis`` is None."""
    if channel_axis is None or arr.ndim == 0:
        return arr.reshape(1, -1)
    moved = np.moveaxis(arr, channel_axis, 0)
    channels = moved.shape[0]
    return moved.reshape(channels, moved.size // channels if channels else 0)


# Values per block of the one-pass statistics: a block converted to float64 (256 KiB) stays in cache while its
# min, max, sum and sum of squares are taken, so the array itself is read from memory once.
_BLOCK_VALUES = 1 << 15


def _one_pass(planes: np.ndarray) -> tuple[ChannelStats, ...] | None:
    """Per-channel mean/std/min/max in one read of ``planes``; None when a value is NaN or infinite.

    Each block is converted to float64 once (exact for every real dtype numpy has up to 64 bits, as
    ``mean(dtype=float64)`` does) and shifted by the channel's first value before it is summed and squared:
    the shifted sums keep the variance as accurate as the two-pass formula for image-like data, and a constant
    channel has a standard deviation of exactly 0. A NaN or an infinity shows in the block's min or max, so no
    separate ``isfinite`` pass is needed: such arrays take the masked path."""
    channels, count = planes.shape
    step = max(1, _BLOCK_VALUES // max(channels, 1))
    shift = planes[:, :1].astype(np.float64)
    total, squares = np.zeros(channels), np.zeros(channels)
    lows, highs = np.full(channels, np.inf), np.full(channels, -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: such arrays are refused below anyway
        for start in range(0, count, step):
            # C order whatever the view's strides (astype keeps a channel-last layout, and reductions along a
            # strided axis are several times slower).
            block = np.array(planes[:, start:start + step], dtype=np.float64, order="C")
            np.minimum(lows, block.min(axis=1), out=lows)
            np.maximum(highs, block.max(axis=1), out=highs)
            block -= shift
            total += block.sum(axis=1)
            squares += np.einsum("ij,ij->i", block, block)
    if not (np.isfinite(lows).all() and np.isfinite(highs).all()):
        return None  # NaN propagates through min/max; an infinity is a min or a max
    offsets = total / count
    stds = np.sqrt(np.maximum(squares / count - offsets * offsets, 0.0))
    means = shift[:, 0] + offsets
    rows = zip(means, stds, lows, highs, strict=True)
    return tuple(ChannelStats(float(m), float(d), float(lo), float(hi)) for m, d, lo, hi in rows)


def _fast_path(arr: np.ndarray) -> bool:
    return bool(arr.size) and arr.dtype != np.bool_ and arr.dtype.kind in "iuf"


def _masked_stats(planes: np.ndarray) -> tuple[ChannelStats, ...]:
    """Per-channel statistics over the finite values only (the rare arrays holding NaN or infinities)."""
    stats = []
    for plane in planes.astype(np.float64, copy=False):
        finite = plane[np.isfinite(plane)]
        if finite.size == 0:
            stats.append(ChannelStats(float("nan"), float("nan"), float("nan"), float("nan")))
        else:
            stats.append(
                ChannelStats(float(finite.mean()), float(finite.std()), float(finite.min()), float(finite.max()))
            )
    return tuple(stats)


def _channel_stats(arr: np.ndarray, channel_axis: int | None) -> tuple[tuple[ChannelStats, ...], bool]:
    """The statistics and whether every value was finite (what :func:`summarize` needs, from the same pass)."""
    planes = _planes(arr, channel_axis)
    if _fast_path(arr) and planes.shape[1]:
        stats = _one_pass(planes)
        if stats is not None:
            return stats, True
    return _masked_stats(planes), not np.issubdtype(arr.dtype, np.inexact) or bool(np.isfinite(arr).all())


def channel_stats(array: Any, channel_axis: int | None) -> tuple[ChannelStats, ...]:
    """Per-channel mean/std/min/max over finite values; one entry when ``channel_axis`` is None."""
    return _channel_stats(to_numpy(array), channel_axis)[0]


def summarize(array: Any, channel_axis: int | None = None) -> ArraySummary:
    arr = to_numpy(array)
    channels, all_finite = _channel_stats(arr, channel_axis)
    if all_finite and _fast_path(arr):
        low, high, nonfinite = min(c.min for c in channels), max(c.max for c in channels), 0
    else:
        as_float = arr.astype(np.float64, copy=False)
        finite = as_float[np.isfinite(as_float)] if arr.size else as_float
        low = float(finite.min()) if finite.size else float("nan")
        high = float(finite.max()) if finite.size else float("nan")
        nonfinite = int(arr.size - finite.size)
    return ArraySummary(
        sha256=fingerprint(arr),
        shape=tuple(int(d) for d in arr.shape),
        dtype=str(arr.dtype),
        min=low,
        max=high,
        channels=channels,
        nonfinite=nonfinite,
    )
