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
    """(channels, values) view of ``arr``; one row when ``channel_axis`` is None."""
    if channel_axis is None or arr.ndim == 0:
        return arr.reshape(1, -1)
    # Contiguous per channel: reductions over a strided view (an HWC tensor permuted to CHW) are ~10x slower.
    moved = np.ascontiguousarray(np.moveaxis(arr, channel_axis, 0))
    channels = moved.shape[0]
    return moved.reshape(channels, moved.size // channels if channels else 0)


def _all_finite(arr: np.ndarray) -> bool:
    return not np.issubdtype(arr.dtype, np.inexact) or bool(np.isfinite(arr).all())


def channel_stats(array: Any, channel_axis: int | None) -> tuple[ChannelStats, ...]:
    """Per-channel mean/std/min/max over finite values; one entry when ``channel_axis`` is None."""
    arr = to_numpy(array)
    planes = _planes(arr, channel_axis)
    if arr.size and planes.shape[1] and _all_finite(arr) and arr.dtype != np.bool_:
        # Fast path (the common case): reductions along the value axis, accumulated in float64, no copies
        # of the data for masking.
        means = planes.mean(axis=1, dtype=np.float64)
        stds = planes.std(axis=1, dtype=np.float64)
        mins, maxs = planes.min(axis=1), planes.max(axis=1)
        rows = zip(means, stds, mins, maxs, strict=True)
        return tuple(ChannelStats(float(m), float(d), float(lo), float(hi)) for m, d, lo, hi in rows)
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


def summarize(array: Any, channel_axis: int | None = None) -> ArraySummary:
    arr = to_numpy(array)
    channels = channel_stats(arr, channel_axis)
    if arr.size and _all_finite(arr) and arr.dtype != np.bool_:
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
