"""Tolerance semantics match torch.testing.assert_close; errors are always measured."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gapcheck.compare import Tolerance, TolerancePolicy, compare_arrays, worst


@pytest.mark.parametrize("seed", range(20))
def test_pass_fail_agrees_with_assert_close(seed):
    rng = np.random.default_rng(seed)
    expected = rng.standard_normal((4, 5)).astype(np.float32)
    actual = expected + rng.standard_normal((4, 5)).astype(np.float32) * 10.0 ** rng.uniform(-7, -3)
    tol = Tolerance(rtol=1e-5, atol=1e-5)
    stats = compare_arrays(actual, expected, tol)
    try:
        torch.testing.assert_close(torch.from_numpy(actual), torch.from_numpy(expected), rtol=tol.rtol, atol=tol.atol)
        torch_passed = True
    except AssertionError:
        torch_passed = False
    assert stats.passed == torch_passed
    assert stats.max_abs == pytest.approx(float(np.abs(actual - expected).max()), rel=1e-6)


def test_nan_and_inf_are_handled_explicitly():
    tol = Tolerance(1e-5, 1e-5)
    assert compare_arrays(np.array([np.nan, np.inf]), np.array([np.nan, np.inf]), tol).passed
    stats = compare_arrays(np.array([np.inf, 1.0]), np.array([1.0, 1.0]), tol)
    assert not stats.passed and stats.nonfinite_mismatch == 1 and stats.max_abs == float("inf")
    assert not compare_arrays(np.array([-np.inf]), np.array([np.inf]), tol).passed


def test_shape_mismatch_fails_without_raising():
    stats = compare_arrays(np.zeros((1, 3)), np.zeros((2, 3)), Tolerance(1, 1))
    assert not stats.passed and stats.shape_mismatch


def test_policy_defaults_overrides_and_reduced_precision():
    policy = TolerancePolicy(overrides={"layer1.*": Tolerance(1e-2, 1e-2)})
    assert policy.for_name("layer1.0.conv1") == Tolerance(1e-2, 1e-2)
    assert policy.for_name("fc", np.float32) == Tolerance(1e-4, 1e-4)
    assert policy.for_name("fc", np.float64).rtol < 1e-6
    assert TolerancePolicy(rtol=0.5).for_name("fc").rtol == 0.5
    fp16 = TolerancePolicy(precision="fp16").for_name("fc")
    assert fp16.scale_atol and fp16.atol == 1e-2
    # A value near 0 computed from large terms: in FP16 its budget scales with the tensor's magnitude.
    expected = np.array([1000.0, 0.01])
    actual = np.array([1000.5, 0.2])
    assert compare_arrays(actual, expected, fp16).passed
    assert not compare_arrays(actual, expected, Tolerance(1e-2, 1e-2)).passed


def test_worst_prefers_failures_then_error_ratio():
    tol = Tolerance(1e-3, 1e-3)
    small = compare_arrays(np.array([1.0001]), np.array([1.0]), tol)
    failing = compare_arrays(np.array([1.1]), np.array([1.0]), tol)
    assert worst([small, failing]) is failing and worst([]) is None


@pytest.mark.parametrize("seed", range(10))
def test_float32_fast_path_agrees_with_the_exact_path(seed):
    from gapcheck.compare import _general_stats

    rng = np.random.default_rng(seed)
    expected = rng.standard_normal((3, 7)).astype(np.float32)
    expected[0, 0] = 0.0  # relative error against zero
    actual = expected + rng.standard_normal((3, 7)).astype(np.float32) * 1e-4
    tol = Tolerance(1e-4, 1e-4)
    fast, exact = compare_arrays(actual, expected, tol), _general_stats(actual, expected, tol)
    assert (fast.passed, fast.worst_index, fast.mismatch_fraction) == (exact.passed, exact.worst_index, exact.mismatch_fraction)
    assert fast.max_abs == pytest.approx(exact.max_abs, rel=1e-6) and fast.max_rel == exact.max_rel


def test_integer_outputs_are_compared_exactly_whatever_the_budget():
    for policy in (TolerancePolicy(precision="fp16"), TolerancePolicy(rtol=0.5, atol=1.0)):
        tol = policy.for_name("argmax", np.int64)
        assert tol == Tolerance(0.0, 0.0)
        assert not compare_arrays(np.array([1990]), np.array([1999]), tol).passed
        assert not compare_arrays(np.array([3]), np.array([4]), tol).passed
    named = TolerancePolicy(overrides={"argmax": Tolerance(0, 1)})
    assert compare_arrays(np.array([3]), np.array([4]), named.for_name("argmax", np.int64)).passed


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_nan_negative_or_infinite_tolerances_are_usage_errors(bad):
    from gapcheck.errors import UsageError

    with pytest.raises(UsageError):
        Tolerance(bad, 0.0)
    with pytest.raises(UsageError):
        TolerancePolicy(atol=bad)


def test_noise_floor_widens_only_the_default_fp32_absolute_tolerance():
    from gapcheck.compare import NOISE_FACTOR

    policy = TolerancePolicy()
    assert policy.for_name("m", "float32").atol == 1e-4
    assert policy.for_name("m", "float32", noise_floor=1e-6).atol == 1e-4  # below the dtype default: default holds
    assert policy.for_name("m", "float32", noise_floor=4e-4).atol == NOISE_FACTOR * 4e-4
    assert TolerancePolicy(atol=1e-3).for_name("m", "float32", noise_floor=1.0).atol == 1e-3  # explicit: as given
    assert TolerancePolicy(precision="fp16").for_name("m", "float32", noise_floor=1.0).atol == 1e-2
    assert policy.for_name("ids", "int64", noise_floor=1.0).atol == 0.0  # integers stay exact
    assert policy.for_name("m", "float32", noise_floor=float("nan")).atol == 1e-4


def test_large_integers_are_compared_exactly_not_through_float64():
    """2**62 and 2**62 + 1 are the same float64: equality must decide (token ids, hashes, counts)."""
    a = np.array([[2**62 + 1, 7]], dtype=np.int64)
    e = np.array([[2**62, 7]], dtype=np.int64)
    stats = compare_arrays(a, e, Tolerance(0.0, 0.0))
    assert not stats.passed and stats.mismatch_fraction == 0.5 and stats.max_abs >= 1.0
    assert stats.worst_index == (0, 0)
    assert compare_arrays(e.copy(), e, Tolerance(0.0, 0.0)).passed


def test_the_noise_ceiling_fails_errors_far_above_a_layers_noise_and_size():
    """A 1% weight change in a layer with tiny activations stays under atol=1e-4; the ceiling catches it, while
    an error that is small next to the layer's own values (rel < 1e-4) is never flagged by it."""
    from gapcheck.compare import NOISE_CEILING_FACTOR, NOISE_CEILING_REL

    tiny = np.full((1, 8), 1e-3, dtype=np.float32)
    shifted = tiny + np.float32(1e-5)  # 1% of the values, 1e-5 absolute: under the 1e-4 floor
    policy = TolerancePolicy()
    with_noise = policy.for_name("layer", np.float32, noise_floor=1e-10)
    assert with_noise.noise_ceiling == NOISE_CEILING_FACTOR * 1e-10
    assert compare_arrays(shifted, tiny, policy.for_name("layer", np.float32)).passed  # no noise measured: as before
    stats = compare_arrays(shifted, tiny, with_noise)
    assert not stats.passed and stats.error_ratio > 1 and stats.budget == pytest.approx(NOISE_CEILING_REL * 1e-3)
    big = np.full((1, 8), 1e3, dtype=np.float32)
    assert compare_arrays(big + np.float32(0.06), big, with_noise).passed  # rel 6e-5: noise of a large layer
    assert policy.for_name("layer", np.float32, noise_floor=0.0).noise_ceiling is None  # exact in torch: no claim
    assert TolerancePolicy(atol=1e-3).for_name("layer", np.float32, noise_floor=1e-10).noise_ceiling is None


def test_the_error_ratio_has_one_meaning_above_1_exactly_where_an_element_fails():
    """Issue 23: export-diff's ratio (max |err| / budget at max |expected|) and nightly's (per element) differed.
    Off by 1.2e-4 everywhere, the small reference values fail: the ratio must be > 1, not 1.2e-4 / 1.1e-3."""
    from gapcheck.compare import Tolerance, compare_arrays

    expected = np.array([10.0, 0.001, -0.002, 5.0], dtype=np.float32)
    tol = Tolerance(1e-4, 1e-4)
    for e in (expected, expected.astype(np.float64)):  # the float32 fast path and the float64 general path
        stats = compare_arrays(e + e.dtype.type(1.2e-4), e, tol)
        assert not stats.passed and stats.error_ratio > 1
        assert stats.error_ratio == pytest.approx(1.2e-4 / (1e-4 + 1e-4 * 0.001), rel=1e-3)
    inf_expected = expected.astype(np.float64)
    inf_expected[0] = np.inf
    assert compare_arrays(inf_expected, inf_expected, tol).error_ratio == 0.0  # the same infinity matches
    nan_actual = inf_expected.copy()
    nan_actual[1] = np.nan
    assert compare_arrays(nan_actual, inf_expected, tol).error_ratio == np.inf
    ints = np.array([2**62, 3], dtype=np.int64)
    assert compare_arrays(ints + np.array([1, 0]), ints, Tolerance(0.0, 0.0)).error_ratio == np.inf
    assert compare_arrays(ints, ints, Tolerance(0.0, 0.0)).error_ratio == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_passed_and_the_error_ratio_agree_on_every_path(seed):
    from gapcheck.compare import Tolerance, compare_arrays, per_sample

    rng = np.random.default_rng(seed)
    dtype = [np.float32, np.float64, np.float16][seed % 3]
    expected = (rng.standard_normal((6, 40)) * 10.0 ** rng.integers(-4, 4, (6, 40))).astype(dtype)
    actual = expected + (rng.standard_normal((6, 40)) * 1e-3 * (rng.random((6, 40)) < 0.05)).astype(dtype)
    if seed >= 3:
        actual[2, 3] = np.nan
    for tol in (Tolerance(1e-4, 1e-4), Tolerance(1e-3, 0.0), Tolerance(0.0, 1e-5), Tolerance(1e-4, 1e-4, noise_ceiling=1e-6)):
        stats = compare_arrays(actual, expected, tol)
        assert stats.passed == (stats.error_ratio <= 1.0)
        batch = per_sample(actual, expected, tol)
        for i in range(6):
            one = compare_arrays(actual[i:i + 1], expected[i:i + 1], tol)
            assert bool(batch.passed[i]) == one.passed
            assert batch.error_ratio[i] == pytest.approx(one.error_ratio, rel=1e-6)
            assert batch.max_abs[i] == pytest.approx(one.max_abs, rel=1e-6)
