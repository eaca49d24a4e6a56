"""The canonical fingerprint and per-channel statistics every command shares."""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from gapcheck.tensors import canonical_bytes, channel_stats, fingerprint, summarize


def test_fingerprint_is_sha256_of_the_canonical_bytes():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert fingerprint(array) == hashlib.sha256(canonical_bytes(array)).hexdigest()
    assert canonical_bytes(array).startswith(b"<f4|3,4|")


def test_fingerprint_depends_on_dtype_shape_and_values_not_on_memory_layout():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert fingerprint(array) == fingerprint(np.asfortranarray(array))  # layout is normalised
    assert fingerprint(array) == fingerprint(array.astype(">f4"))  # so is byte order
    assert fingerprint(array) == fingerprint(torch.from_numpy(array))  # torch and numpy agree
    assert fingerprint(array) != fingerprint(array.reshape(4, 3))
    assert fingerprint(array) != fingerprint(array.astype(np.float64))
    changed = array.copy()
    changed[1, 1] = np.nextafter(changed[1, 1], np.float32(100))
    assert fingerprint(array) != fingerprint(changed)
    assert fingerprint(array.T) == fingerprint(np.ascontiguousarray(array.T))


def test_empty_arrays_hash_by_shape():
    assert fingerprint(np.zeros((0, 3), np.float32)) != fingerprint(np.zeros((3, 0), np.float32))


def test_channel_stats_per_axis_ignore_non_finite_values():
    image = np.stack([np.full((2, 2), 1.0), np.array([[0.0, 2.0], [np.nan, 4.0]])])  # CHW
    first, second = channel_stats(image, channel_axis=0)
    assert (first.mean, first.std, first.min, first.max) == (1.0, 0.0, 1.0, 1.0)
    assert second.mean == 2.0 and second.min == 0.0 and second.max == 4.0
    summary = summarize(image, channel_axis=0)
    assert summary.nonfinite == 1 and summary.shape == (2, 2, 2) and summary.max == 4.0
    assert len(channel_stats(image, None)) == 1
