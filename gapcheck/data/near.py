"""Exact near-duplicate search on packed 64-bit perceptual hashes: query split × reference split only.

Brute force with numpy: XOR a block of queries against every reference hash and count bits
(``np.bitwise_count``). It is exact (no recall loss, unlike HNSW-style approximate indexes)
and memory-bounded by the block size; ``scripts/bench_data.py`` measures it against the
all-pairs baseline. Hashes within one split are never compared with each other.
"""
from __future__ import annotations

import numpy as np

BLOCK_BYTES = 64 * 1024 * 1024  # the XOR block: queries × references × 8 bytes stays under this


def max_distance(similarity: float, bits: int = 64) -> int:
    """Hamming threshold for a similarity in [0, 1] (0.9 → 6 of 64 bits may differ)."""
    return int(np.floor((1.0 - similarity) * bits + 1e-9))


def hamming_pairs(query: np.ndarray, reference: np.ndarray, max_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query index, reference index, distance) of every pair within ``max_bits``, sorted by query then reference."""
    query = np.ascontiguousarray(query, dtype=np.uint64)
    reference = np.ascontiguousarray(reference, dtype=np.uint64)
    if not len(query) or not len(reference):
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    rows = max(1, BLOCK_BYTES // (8 * len(reference)))
    found_q, found_r, found_d = [], [], []
    for start in range(0, len(query), rows):
        block = query[start:start + rows]
        distance = np.bitwise_count(block[:, None] ^ reference[None, :])
        q, r = np.nonzero(distance <= max_bits)
        found_q.append(q + start)
        found_r.append(r)
        found_d.append(distance[q, r].astype(np.int64))
    return np.concatenate(found_q), np.concatenate(found_r), np.concatenate(found_d)


def all_pairs_count(hashes: np.ndarray, max_bits: int) -> int:
    """The baseline the search avoids: every pair of the union (upper triangle), for the benchmark."""
    hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
    total = 0
    rows = max(1, BLOCK_BYTES // (8 * max(1, len(hashes))))
    for start in range(0, len(hashes), rows):
        block = hashes[start:start + rows]
        distance = np.bitwise_count(block[:, None] ^ hashes[None, :])
        upper = np.arange(start, start + len(block))[:, None] < np.arange(len(hashes))[None, :]
        total += int(np.count_nonzero((distance <= max_bits) & upper))
    return total
