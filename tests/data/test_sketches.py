from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gapcheck.data.sketches import ColumnStats, Reservoir, column_stats, kll_ks_distance, kll_rank_error


def _partials(values: np.ndarray, names: list[str], cuts: list[int], k: int):
    bounds = [0, *cuts, len(values)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        yield (column_stats(pd.Series(values[a:b]), names[a:b]),
               Reservoir.of(names[a:b], {"x": values[a:b]}, seed=7, k=k))


def _merge(parts, order):
    stats, sample = ColumnStats(), Reservoir(k=parts[0][1].k)
    for i in order:
        stats, sample = stats.merge(parts[i][0]), sample.merge(parts[i][1])
    return stats, sample


def test_any_sharding_and_merge_order_gives_the_same_sample_and_counts():
    rng = np.random.default_rng(0)
    values = rng.normal(size=5000)
    values[::97] = np.nan
    names = [f"t:{i}" for i in range(len(values))]
    one = list(_partials(values, names, [], 300))
    many = list(_partials(values, names, [7, 1000, 1001, 2500, 4999], 300))
    whole, _ = one[0][0], one[0][1]
    for order in (range(len(many)), reversed(range(len(many))), [3, 0, 5, 1, 4, 2]):
        stats, sample = _merge(many, list(order))
        assert np.array_equal(sample.priorities, one[0][1].priorities)  # exact: the same rows, same order
        assert np.array_equal(sample.columns["x"], one[0][1].columns["x"], equal_nan=True)
        assert (stats.rows, stats.nulls, stats.numeric, stats.low, stats.high) == \
               (whole.rows, whole.nulls, whole.numeric, whole.low, whole.high)
        assert stats.total == pytest.approx(whole.total, rel=1e-12)  # sums: exact per order; run_job fixes the order


def test_sample_is_uniform_enough_and_states_its_bound():
    values = np.arange(100_000, dtype=float)
    sample = Reservoir.of([f"r{i}" for i in range(len(values))], {"x": values}, seed=1, k=20_000)
    assert len(sample.priorities) == 20_000 and sample.seen == 100_000
    # DKW: the sample's CDF is within the bound of the full data's at 95%
    assert sample.dkw_bound() == pytest.approx(0.0096, abs=1e-4)
    grid = np.linspace(0, 100_000, 50)
    sample_cdf = np.searchsorted(np.sort(sample.columns["x"]), grid) / 20_000
    assert np.max(np.abs(sample_cdf - grid / 100_000)) < sample.dkw_bound()


def test_kll_ks_distance_is_within_its_stated_error():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=50_000), rng.normal(size=50_000) + 0.5
    exact = 0.1974  # KS D of N(0,1) vs N(0.5,1)
    sa, sb = column_stats(pd.Series(a), []), column_stats(pd.Series(b), [])
    assert abs(kll_ks_distance(sa.kll, sb.kll) - exact) < 2 * kll_rank_error() + 0.01


def test_mixed_text_and_numbers_are_counted_apart():
    stats = column_stats(pd.Series(["1.5", "2", None, "seven", "3"], dtype=object), ["a", "b", "c", "d", "e"])
    assert (stats.rows, stats.nulls, stats.numeric, stats.text) == (5, 1, 3, 1)
    assert stats.bad_cells == ["d"] and not stats.is_numeric  # 3 of 4 filled cells are numbers: < 90%
