from __future__ import annotations

import numpy as np
import pytest

from gapcheck.data.near import all_pairs_count, brute_pairs, hamming_pairs, max_distance


def test_search_is_exact_against_a_python_reference():
    rng = np.random.default_rng(0)
    reference = rng.integers(0, 2**63, 500, dtype=np.uint64)
    query = reference[:50] ^ (np.uint64(1) << rng.integers(0, 63, 50).astype(np.uint64))  # one bit flipped
    query = np.concatenate([query, rng.integers(0, 2**63, 50, dtype=np.uint64)])
    qi, ri, d = hamming_pairs(query, reference, 6)
    expected = sorted((i, j, bin(int(a) ^ int(b)).count("1")) for i, a in enumerate(query)
                      for j, b in enumerate(reference) if bin(int(a) ^ int(b)).count("1") <= 6)
    assert list(zip(qi.tolist(), ri.tolist(), d.tolist(), strict=True)) == expected
    assert [(i, j) for i, j, _ in expected[:50]] == [(i, i) for i in range(50)]


def test_threshold_and_baseline():
    assert max_distance(0.9) == 6 and max_distance(1.0) == 0 and max_distance(0.0) == 64
    hashes = np.array([0, 1, 3, 2**40 + 2**41 + 2**42], dtype=np.uint64)
    assert all_pairs_count(hashes, 1) == 2  # 0-1 and 1-3
    empty = hamming_pairs(np.zeros(0, np.uint64), hashes, 6)
    assert all(len(a) == 0 for a in empty)


def test_engine_search_gives_the_driver_search_pairs():
    from gapcheck.data import near
    from gapcheck.engines import open_engine

    rng = np.random.default_rng(3)
    reference = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    query = np.concatenate([reference[::7] ^ np.uint64(0b101), rng.integers(0, 2**63, 9000, dtype=np.uint64)])
    expected = near.hamming_pairs(query, reference, 6)
    for kind in ("serial", "local"):
        with open_engine(kind, workers=2) if kind == "local" else open_engine(kind) as engine:
            got = near.engine_search(engine, threshold=0)(query, reference, 6)  # 3 query blocks as shards
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    assert len(expected[0]) == len(reference[::7])


def test_leakage_with_the_search_on_the_engine_finds_the_same_pairs(photo_splits):
    from gapcheck.data.api import leakage
    from gapcheck.engines import open_engine

    splits = [f"train={photo_splits['train']}", f"val={photo_splits['leaky_val']}"]
    with open_engine("serial") as engine:
        driver = leakage(splits, engine=engine)
        on_engine = leakage(splits, engine=engine, search_threshold=0)
    assert driver.near == on_engine.near and len(driver.near) == 4


def _planted(rng, references: int, queries: int, max_flip: int) -> tuple[np.ndarray, np.ndarray]:
    """Random 64-bit references, and queries half of which are references with 0..max_flip bits flipped."""
    reference = rng.integers(0, 2**64 - 1, references, dtype=np.uint64, endpoint=True)
    query = rng.integers(0, 2**64 - 1, queries, dtype=np.uint64, endpoint=True)
    half = queries // 2
    source = rng.integers(0, references, half)
    flips = np.zeros(half, np.uint64)
    for j, count in enumerate(rng.integers(0, max_flip + 1, half)):
        for bit in rng.choice(64, count, replace=False):
            flips[j] |= np.uint64(1) << np.uint64(bit)
    query[:half] = reference[source] ^ flips
    return query, reference


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("max_bits", [0, 3, 6, 8, 12])
@pytest.mark.parametrize("widths", [None, (21, 21, 22), (16, 16, 16, 16), (12, 13, 13, 13, 13), (8,) * 8])
def test_multi_index_gives_exactly_the_brute_force_pairs(max_bits, widths):
    from gapcheck.data.mih import HammingIndex

    rng = np.random.default_rng(max_bits)
    query, reference = _planted(rng, 20_000, 1_000, max_bits + 2)
    reference[:50] = reference[50]  # a bucket of 51 identical hashes: every copy must be found, once
    query[-1] = reference[50]
    expected = brute_pairs(query, reference, max_bits)
    index = HammingIndex(reference, max_bits, widths, threads=2)
    assert _same(index.search(query, block=97), expected)  # many blocks, on two threads
    assert len(expected[0]) >= 51 + 100  # the bucket of copies and a third or more of the planted queries


def test_multi_index_with_tiny_chunks_and_skewed_buckets(monkeypatch):
    from gapcheck.data import mih

    monkeypatch.setattr(mih, "CHUNK", 64)  # forces many chunks, and single queries over the chunk
    rng = np.random.default_rng(7)
    query, reference = _planted(rng, 5_000, 300, 8)
    reference[:2_000] = np.uint64(0)  # blank images: one hash, a skewed bucket
    query[:5] = np.uint64(1)
    assert _same(mih.HammingIndex(reference, 8, threads=1).search(query), brute_pairs(query, reference, 8))


def test_hamming_pairs_picks_the_index_when_it_is_cheaper(monkeypatch):
    from gapcheck.data import mih, near

    built = []
    original = mih.HammingIndex.__init__

    def spy(self, *args, **kwargs):
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(mih.HammingIndex, "__init__", spy)
    rng = np.random.default_rng(11)
    small_q, small_r = _planted(rng, 300, 20, 6)
    near.hamming_pairs(small_q, small_r, 6)
    assert built == []  # 6,000 comparisons: brute force
    query, reference = _planted(rng, 50_000, 5_000, 6)
    got = near.hamming_pairs(query, reference, 6)
    assert built == [1] and _same(got, brute_pairs(query, reference, 6))


@pytest.mark.slow
def test_multi_index_equals_brute_force_on_a_200k_sample():
    """The issue's check: the same pairs as brute force on 200,000 hashes (radius 8), with planted near copies."""
    from gapcheck.data.mih import HammingIndex

    rng = np.random.default_rng(200)
    query, reference = _planted(rng, 200_000, 200_000, 10)
    expected = brute_pairs(query, reference, 8)
    assert _same(HammingIndex(reference, 8).search(query), expected)
    assert len(expected[0]) > 80_000
