from __future__ import annotations

import numpy as np

from gapcheck.data.near import all_pairs_count, hamming_pairs, max_distance


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
