"""Multi-index hashing: exact Hamming-radius search over 64-bit codes, sub-quadratic (see :mod:`gapcheck.data.near`).

Layout, per substring i (``widths[i]`` bits, taken from the top of the code down):

- ``hashes[i]``: the reference codes sorted by substring i (8 bytes per reference);
- ``order[i]``: their original positions (4 bytes per reference while under 2³¹ references);
- ``offsets[i]``: bucket starts, one per possible key, 2^widths[i] + 1 entries (4 bytes each under 2³¹ references).

Memory: m × (12 × N + 4 × 2^w) bytes — 10M references at m = 3 (w = 21, 21, 22): 0.37 GiB.

A query block probes, per substring, its key XOR every ``flip`` (all w-bit values of at most ⌊r/m⌋ set
bits), reads the buckets as contiguous slices of ``hashes[i]`` and keeps a candidate when its full
distance is ≤ r and no earlier substring is within ⌊r/m⌋ (that substring reported it already).
Candidates are verified in chunks of at most :data:`CHUNK` so a skewed bucket (many blank images with
one hash) bounds memory by the chunk, not by the bucket.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

BITS = 64
MAX_WIDTH = 24  # a substring's direct-address table: 2^24 + 1 offsets (128 MiB) at most
CHUNK = 1 << 22  # candidates verified at once (~100 MB of temporaries)
PROBE_NS = 30.0  # one probe: key, two reads of a 16 MiB offsets table (cache misses), bookkeeping
CANDIDATE_NS = 8.0  # one candidate: position, repeat, read, XOR, popcount, compare
BRUTE_NS = 0.6  # one brute-force comparison (XOR + popcount into preallocated buffers)
BUILD_NS = 60.0  # per reference and substring: key, stable argsort, reorder, offsets


@dataclass(frozen=True)
class IndexPlan:
    widths: tuple[int, ...]
    radius: int  # per substring: ⌊max_bits / m⌋
    probes: int  # keys probed per query, all substrings
    candidates: float  # expected candidates per query for uniformly distributed codes
    cost: float  # estimated ns per query


def _widths(parts: int) -> tuple[int, ...]:
    base, extra = divmod(BITS, parts)
    return tuple(base + (1 if i >= parts - extra else 0) for i in range(parts))


def index_plan(references: int, max_bits: int) -> IndexPlan | None:
    """The cheapest substring split for ``references`` codes at radius ``max_bits`` (None: no table fits)."""
    best: IndexPlan | None = None
    cap = min(MAX_WIDTH, max(8, math.ceil(math.log2(max(references, 2))) + 2))
    for parts in range(2, max_bits + 2):
        widths = _widths(parts)
        if max(widths) > cap:
            continue
        radius = max_bits // parts
        per = [sum(math.comb(w, k) for k in range(radius + 1)) for w in widths]
        candidates = sum(p * references / 2.0 ** w for p, w in zip(per, widths, strict=True))
        cost = PROBE_NS * sum(per) + CANDIDATE_NS * candidates
        if best is None or cost < best.cost:
            best = IndexPlan(widths, radius, sum(per), candidates, cost)
    return best


def flips(width: int, radius: int) -> np.ndarray:
    """Every ``width``-bit value with at most ``radius`` set bits (0 first)."""
    values = [0]
    for k in range(1, radius + 1):
        values += [sum(1 << b for b in bits) for bits in combinations(range(width), k)]
    return np.asarray(values, dtype=np.uint64)


class HammingIndex:
    """Exact radius search over a fixed reference set of 64-bit codes (build once, query in blocks)."""

    def __init__(self, reference: np.ndarray, max_bits: int, widths: Sequence[int] | None = None,
                 threads: int | None = None) -> None:
        reference = np.ascontiguousarray(reference, dtype=np.uint64)
        plan = index_plan(len(reference), max_bits)
        self.widths = tuple(widths) if widths is not None else (plan.widths if plan else _widths(3))
        if sum(self.widths) != BITS or max(self.widths) > MAX_WIDTH:
            raise ValueError(f"substring widths {self.widths} must add up to {BITS}, each at most {MAX_WIDTH}")
        self.max_bits = int(max_bits)
        self.radius = self.max_bits // len(self.widths)
        self.size = len(reference)
        self.threads = threads or min(4, os.cpu_count() or 1)
        shifts, start = [], BITS
        for w in self.widths:
            start -= w
            shifts.append(start)
        self.shifts = tuple(shifts)
        self.masks = tuple(np.uint64((1 << w) - 1) for w in self.widths)
        self.flips = tuple(flips(w, self.radius) for w in self.widths)
        position = np.int32 if len(reference) < 2**31 else np.int64
        self.hashes, self.order, self.offsets = [], [], []
        for w, shift, mask in zip(self.widths, self.shifts, self.masks, strict=True):
            keys = (reference >> np.uint64(shift)) & mask
            order = np.argsort(keys, kind="stable")
            self.hashes.append(reference[order])
            self.order.append(order.astype(position))
            counts = np.bincount(keys.astype(np.int64), minlength=1 << w)
            # int32 while it fits: half the table, so more of it stays in cache (probes are random reads into it)
            self.offsets.append(np.concatenate([[0], np.cumsum(counts)]).astype(position))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for group in (self.hashes, self.order, self.offsets) for a in group)

    def search(self, query: np.ndarray, block: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query index, reference index, distance) of every pair within the radius, sorted by query then reference."""
        query = np.ascontiguousarray(query, dtype=np.uint64)
        if not len(query) or not self.size:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        probes = sum(len(f) for f in self.flips)
        step = block or max(1, min(65_536, CHUNK // max(probes, 1)))
        starts = list(range(0, len(query), step))
        if self.threads > 1 and len(starts) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(self.threads) as pool:
                parts = list(pool.map(lambda s: self._block(query[s:s + step], s), starts))
        else:
            parts = [self._block(query[s:s + step], s) for s in starts]
        qi = np.concatenate([p[0] for p in parts])
        ri = np.concatenate([p[1] for p in parts])
        dist = np.concatenate([p[2] for p in parts])
        order = np.lexsort((ri, qi))
        return qi[order], ri[order], dist[order]

    def _block(self, query: np.ndarray, offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for part in range(len(self.widths)):
            flips = self.flips[part]
            keys = (((query >> np.uint64(self.shifts[part])) & self.masks[part])[:, None] ^ flips[None, :])
            keys = keys.view(np.int64)  # < 2^24: the same bits as an index; (queries, flips), query-major
            begin = self.offsets[part][keys]
            counts = self.offsets[part][keys + 1]
            counts -= begin
            per_query = np.cumsum(counts.sum(axis=1, dtype=np.int64))
            first = 0
            while first < len(query):
                # the next run of queries holding at most CHUNK candidates (at least one query)
                base = int(per_query[first - 1]) if first else 0
                last = max(first + 1, int(np.searchsorted(per_query, base + CHUNK, side="right")))
                owner, position, distance = self._verify(part, query[first:last], begin[first:last],
                                                         counts[first:last])
                if len(position):
                    found.append((owner + (offset + first), self.order[part][position].astype(np.int64), distance))
                first = last
        if not found:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        return (np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]),
                np.concatenate([f[2] for f in found]))

    def _verify(self, part: int, query: np.ndarray, begin: np.ndarray,
                counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query number, sorted position, distance) of the candidates of some queries' probes that are within
        the radius and not within ⌊r/m⌋ on an earlier substring. Few passes over the candidates: they dominate."""
        flat_counts = counts.ravel()
        n = int(flat_counts.sum())
        if n == 0:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty
        heads = np.cumsum(flat_counts, dtype=np.int64)
        heads -= flat_counts
        heads -= begin.ravel()  # position = arange(n) - (flat start of the probe's run - its bucket start)
        position = np.arange(n, dtype=np.int64)
        position -= np.repeat(heads, flat_counts)
        per_query = counts.sum(axis=1, dtype=np.int64)
        query_ends = np.cumsum(per_query)
        values = np.repeat(query, per_query)
        np.bitwise_xor(values, self.hashes[part][position], out=values)
        distance = np.bitwise_count(values)
        hits = np.flatnonzero(distance <= self.max_bits)
        xor = values[hits]
        keep = np.ones(len(hits), dtype=bool)
        for earlier in range(part):  # reported by an earlier substring already
            sub = (xor >> np.uint64(self.shifts[earlier])) & self.masks[earlier]
            keep &= np.bitwise_count(sub) > self.radius
        hits = hits[keep]
        owner = np.searchsorted(query_ends, hits, side="right")
        return owner, position[hits], distance[hits].astype(np.int64)
