"""Exact near-duplicate search on packed 64-bit perceptual hashes: query split × reference split.

Two exact methods with one contract (every pair within the radius, sorted by query then reference):

- brute force (:func:`brute_pairs`): XOR each query against every reference hash and count bits
  (``np.bitwise_count``) into two reference-sized buffers — quadratic, fine to ~10⁹ comparisons;
- multi-index hashing (:class:`HammingIndex`, Norouzi, Punjani & Fleet, CVPR 2012) by hand in numpy:
  the 64 bits are cut into m substrings; two hashes within r bits agree within ⌊r/m⌋ bits on at
  least one substring (pigeonhole), so each query probes, per substring, every key within ⌊r/m⌋
  bits of its own and verifies the candidates found there with the full 64-bit distance. Buckets
  hold the reference hashes themselves, sorted by substring (contiguous reads, no gather), and a
  pair is kept only from the first substring that could have found it, so each pair comes once.
  Sub-quadratic: for 10M random references at r = 8 (m = 3, 232 probes per substring) a query
  verifies ~3,300 candidates instead of 10M. Query blocks run on threads (numpy releases the GIL).

:func:`hamming_pairs` picks the cheaper one from a cost model; both are exact (no recall loss,
unlike HNSW-style or LSH indexes), and a test checks them against each other.
``scripts/bench_data.py`` measures them (and faiss's binary hash indexes when installed).
"""
from __future__ import annotations

import numpy as np

from gapcheck.data.mih import BRUTE_NS, BUILD_NS, HammingIndex, IndexPlan, index_plan

BLOCK_BYTES = 64 * 1024 * 1024  # the all-pairs baseline's XOR block (benchmark only)


def max_distance(similarity: float, bits: int = 64) -> int:
    """Hamming threshold for a similarity in [0, 1] (0.9 → 6 of 64 bits may differ)."""
    return int(np.floor((1.0 - similarity) * bits + 1e-9))


def hamming_pairs(query: np.ndarray, reference: np.ndarray, max_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query index, reference index, distance) of every pair within ``max_bits``, sorted by query then reference:
    multi-index hashing when the cost model says it is cheaper, else brute force (the same pairs either way)."""
    query = np.ascontiguousarray(query, dtype=np.uint64)
    reference = np.ascontiguousarray(reference, dtype=np.uint64)
    plan = index_plan(len(reference), max_bits)
    if plan is not None and index_cost(plan, len(query), len(reference)) < brute_cost(len(query), len(reference)):
        return HammingIndex(reference, max_bits, plan.widths).search(query)
    return brute_pairs(query, reference, max_bits)


def brute_cost(queries: int, references: int) -> float:
    """Estimated ns of the brute-force search."""
    return BRUTE_NS * queries * references


def index_cost(plan: IndexPlan, queries: int, references: int) -> float:
    """Estimated ns of building the multi-index over ``references`` and querying it ``queries`` times."""
    return BUILD_NS * references * len(plan.widths) + plan.cost * queries


def search_cost(queries: int, references: int, max_bits: int) -> float:
    """Estimated ns of :func:`hamming_pairs` (whichever method it picks)."""
    plan = index_plan(references, max_bits)
    brute = brute_cost(queries, references)
    return min(brute, index_cost(plan, queries, references)) if plan is not None else brute


def brute_pairs(query: np.ndarray, reference: np.ndarray, max_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(query index, reference index, distance) of every pair within ``max_bits``, sorted by query then reference.

    One query at a time against the whole reference, into two preallocated buffers (XOR, popcount): no
    queries × references temporaries, and measured ~4x faster than broadcasting blocks of queries.
    """
    query = np.ascontiguousarray(query, dtype=np.uint64)
    reference = np.ascontiguousarray(reference, dtype=np.uint64)
    if not len(query) or not len(reference):
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    xor = np.empty(len(reference), np.uint64)
    bits = np.empty(len(reference), np.uint8)
    found_q, found_r, found_d = [], [], []
    for index, value in enumerate(query):
        np.bitwise_xor(reference, value, out=xor)
        np.bitwise_count(xor, out=bits)
        hits = np.flatnonzero(bits <= max_bits)
        if len(hits):
            found_q.append(np.full(len(hits), index, np.int64))
            found_r.append(hits.astype(np.int64))
            found_d.append(bits[hits].astype(np.int64))
    if not found_q:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
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


#: Above this much estimated work (in brute-force comparisons, :func:`search_cost` / BRUTE_NS) the search runs as a
#: job on the engine (query blocks as shards); below it the driver is faster than shipping the reference hashes to
#: workers. With the multi-index, 10M × 1M hashes at radius 8 stays on the driver (minutes on its threads).
ENGINE_SEARCH_PAIRS = 2_000_000_000_000
QUERY_BLOCK = 4_096
MAX_SEARCH_SHARDS = 64  # with the multi-index each shard builds it once: few large query blocks


def search_task(payload: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One block of queries against the whole reference (module level: every engine can ship it)."""
    qi, ri, d = hamming_pairs(payload["query"], payload["reference"], payload["max_bits"])
    return qi + payload["offset"], ri, d


def _no_pairs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    empty = np.zeros(0, np.int64)
    return empty, empty, empty


def _concat(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(np.concatenate([x, y]) for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


def engine_search(engine: object, threshold: int = ENGINE_SEARCH_PAIRS):
    """A ``hamming_pairs``-compatible search that runs large searches as a job on ``engine`` (same result, in order)."""
    from gapcheck.engines import Shard, run_job
    from gapcheck.errors import BackendError

    def search(query: np.ndarray, reference: np.ndarray, max_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if search_cost(len(query), len(reference), max_bits) / BRUTE_NS < threshold:
            return hamming_pairs(query, reference, max_bits)
        block = max(QUERY_BLOCK, -(-len(query) // MAX_SEARCH_SHARDS))
        shards = [Shard(i, {"query": np.ascontiguousarray(query[s:s + block], np.uint64),
                            "reference": reference, "max_bits": max_bits, "offset": s},
                        items=(f"near-duplicate queries {s}-{min(s + block, len(query)) - 1}",))
                  for i, s in enumerate(range(0, len(query), block))]
        run = run_job(engine, search_task, shards, empty=_no_pairs, merge=_concat,  # type: ignore[arg-type]
                      description="near-duplicate search")
        if run.failures:  # a search that lost a block would silently miss pairs: refuse instead
            raise BackendError(f"near-duplicate search failed: {run.failures[0].error}")
        return run.merged

    return search
