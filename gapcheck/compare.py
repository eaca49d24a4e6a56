"""Tolerance logic with ``torch.testing.assert_close`` semantics, and the error statistics users tune with.

An element passes when ``|actual - expected| <= atol + rtol * |expected|``; NaN
matches NaN and Inf matches an Inf of the same sign (``equal_nan=True``), a
non-finite value against a finite one never matches. We always compute the
observed errors, not just pass/fail, so users can see how close they are.

The **error ratio** has one meaning everywhere (export-diff's layers, nightly's outputs and samples,
the history's trend and drift test): the largest, over the elements, of ``|actual - expected|`` divided
by that element's allowed error ``min(atol + rtol * |expected|, cap)``. An element fails exactly when
its ratio is above 1, so a comparison passes exactly when its ratio is at most 1; equal values (NaN
with NaN, the same infinity) count 0, a non-finite value on one side only counts as infinitely far,
and a differing value where nothing is allowed is infinitely far. (Dividing the largest error by the
budget at the largest ``|expected|`` instead — what export-diff's ordering once used — puts a failing
element with a small reference value at a fraction of "the tolerance".) :func:`per_sample` gives the
same statistics per sample (axis 0) for a batch, vectorized.
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field

import numpy as np

from gapcheck.errors import UsageError

# Defaults per dtype of the *reference*. fp32 is looser than torch.testing's
# (1.3e-6/1e-5): two correct runtimes reorder float sums (conv algorithms,
# fused kernels), which gives ~1e-5 relative noise through a deep network.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}
# The noise-floor rule (fp32 comparisons at default tolerances): a float32 tensor carries the rounding
# noise of the float32 arithmetic that made it, and that grows with the layer's magnitude and depth
# (|err| 2-5e-4 where resnet50's activations reach 200-500). torch's own float32 result is measured
# once against a float64 run of the same model on the same input; a layer's absolute budget is
# then max(dtype atol, NOISE_FACTOR x that fp32-vs-fp64 error). Two correct fp32 runtimes differ
# by about as much as either differs from float64, so 10x leaves room for another kernel's order of
# sums while a real defect (a 1% weight change is 1e-2 relative) stays far beyond it.
NOISE_FACTOR = 10.0
# The ceiling rule (same conditions): the floor atol = 1e-4 is far above the noise of a layer with tiny
# activations, where a 1% change of one weight stays under it (resnext50 layer2.2.bn3: 9.2e-5 against a
# noise of 9.7e-8). So an error also fails when it is above BOTH NOISE_CEILING_FACTOR x the layer's noise
# AND NOISE_CEILING_REL x the layer's largest |value|. Measured over 65 clean zoo runs (27 models, both
# exporters, up to 1536x1536 inputs; 8,442 layers): error/noise reached 278 (a global average pool over a
# 768x768 map in ONNX Runtime) but error/max|value| never passed 1.9e-5 (2.6e-6 at usual sizes); 16 of 18
# planted 1% weight changes lie above both (the lowest: ratio 341, relative 3.0e-4). Neither alone would do.
NOISE_CEILING_FACTOR = 100.0
NOISE_CEILING_REL = 1e-4
# When the test side runs in reduced precision, the budget is set by the test dtype.
PRECISION_TOLERANCES: dict[str, tuple[float, float]] = {
    "fp32": DEFAULT_TOLERANCES["float32"],
    "fp16": (1e-2, 1e-2),
    "bf16": (5e-2, 5e-2),
}


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    # Reduced precision: an FP16 value near 0 computed from large terms carries the rounding error of those terms,
    # so the absolute budget scales with the tensor's largest magnitude (atol * max(1, max|expected|)).
    scale_atol: bool = False
    # The ceiling rule (see NOISE_CEILING_FACTOR): an absolute error above max(noise_ceiling,
    # NOISE_CEILING_REL x max|expected|) fails whatever atol and rtol allow. None: no ceiling.
    noise_ceiling: float | None = None

    def __post_init__(self) -> None:
        _check_tolerance(self.rtol, "rtol")
        _check_tolerance(self.atol, "atol")
        _check_tolerance(self.noise_ceiling, "noise_ceiling")

    def cap(self, expected_absmax: float) -> float:
        """The ceiling on |error| for a tensor whose largest |value| is ``expected_absmax`` (inf without one)."""
        if self.noise_ceiling is None:
            return math.inf
        return max(self.noise_ceiling, NOISE_CEILING_REL * expected_absmax)


def _check_tolerance(value: float | None, name: str) -> None:
    # NaN would pass everything (every comparison with NaN is False) and a negative one would fail everything.
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise UsageError(f"{name} must be a finite number >= 0, got {value}")


@dataclass(frozen=True)
class TolerancePolicy:
    """Global tolerance (None = dtype default) plus per-name overrides (glob patterns allowed)."""

    rtol: float | None = None
    atol: float | None = None
    overrides: dict[str, Tolerance] = field(default_factory=dict)
    precision: str = "fp32"

    def __post_init__(self) -> None:
        _check_tolerance(self.rtol, "rtol")
        _check_tolerance(self.atol, "atol")

    def for_name(self, name: str, dtype: np.dtype | str = "float32", noise_floor: float | None = None) -> Tolerance:
        """Tolerance for the tensor ``name`` whose reference has ``dtype``.

        Integer and bool tensors (class indices, masks) are compared exactly unless an
        override names them: neither the precision budget nor a global rtol/atol applies.
        ``noise_floor`` (max |fp32 - fp64| of the reference at this tensor) widens the default
        absolute tolerance of an fp32 comparison to ``NOISE_FACTOR * noise_floor``; an explicit
        atol or override is used as given.
        """
        for pattern, tol in self.overrides.items():
            if name == pattern or fnmatch.fnmatchcase(name, pattern):
                return tol
        if not np.issubdtype(np.dtype(dtype), np.floating):
            return Tolerance(0.0, 0.0)
        if self.precision != "fp32":
            default = PRECISION_TOLERANCES[self.precision]
        else:
            default = DEFAULT_TOLERANCES.get(str(np.dtype(dtype)), (0.0, 0.0))
        atol = default[1] if self.atol is None else self.atol
        ceiling = None
        if noise_floor is not None and self.atol is None and self.precision == "fp32" and math.isfinite(noise_floor):
            atol = max(atol, NOISE_FACTOR * noise_floor)
            if noise_floor > 0:  # 0: torch computed it exactly (a lookup); nothing says how close ORT must be
                ceiling = NOISE_CEILING_FACTOR * noise_floor
        return Tolerance(
            rtol=default[0] if self.rtol is None else self.rtol,
            atol=atol,
            scale_atol=self.precision != "fp32",
            noise_ceiling=ceiling,
        )


@dataclass(frozen=True)
class ErrorStats:
    """How far ``actual`` is from ``expected``, and whether it passes the tolerance."""

    passed: bool
    max_abs: float
    max_rel: float
    mean_abs: float
    mismatch_fraction: float
    worst_index: tuple[int, ...] | None
    nonfinite_mismatch: int  # NaN/Inf on one side where the other has a different value
    shape_mismatch: bool = False
    rtol: float = 0.0
    atol: float = 0.0
    expected_absmax: float = 0.0
    cap: float = math.inf  # the ceiling rule's limit on |error| (inf: none)
    ratio: float | None = None  # the error ratio as compare_arrays measured it (see error_ratio)

    @property
    def budget(self) -> float:
        """The largest |error| allowed anywhere in the tensor: atol + rtol·max|expected|, under the ceiling."""
        return min(self.atol + self.rtol * self.expected_absmax, self.cap)

    @property
    def error_ratio(self) -> float:
        """max over the elements of |error| / that element's allowed |error| (> 1 exactly where one fails; see the
        module docstring). Statistics built by hand without ``ratio`` fall back to max |error| / :attr:`budget`."""
        if self.ratio is not None:
            return self.ratio
        allowed = self.budget
        return self.max_abs / allowed if allowed > 0 else float("inf") if self.max_abs > 0 else 0.0


def compare_arrays(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> ErrorStats:
    """Compare two arrays elementwise; never raises for numeric differences."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        return ErrorStats(False, float("inf"), float("inf"), float("inf"), 1.0, None, 0, True, tol.rtol, tol.atol,
                          ratio=float("inf"))
    if actual.size == 0:
        return ErrorStats(True, 0.0, 0.0, 0.0, 0.0, None, 0, False, tol.rtol, tol.atol, ratio=0.0)
    if np.result_type(actual.dtype, expected.dtype) in (np.float16, np.float32):
        # Fast path, in float32 as assert_close computes for float32 tensors: one subtraction decides
        # whether anything is non-finite (Inf - Inf and NaN propagate into the difference).
        a = actual.astype(np.float32, copy=False)
        e = expected.astype(np.float32, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            diff = np.abs(a - e)
        if np.isfinite(diff).all():
            return _finite_stats(diff, np.abs(e), tol)
    if actual.dtype.kind in "iub" and expected.dtype.kind in "iub" and tol.rtol == 0 and tol.atol == 0:
        return _exact_integer_stats(actual, expected, tol)
    return _general_stats(actual, expected, tol)


def _exact_integer_stats(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> ErrorStats:
    """Integers compared exactly: float64 cannot tell 2**62 from 2**62 + 1, so equality decides, not a difference.

    The sizes reported are the float64 differences, at least 1 where the values differ.
    """
    differ = np.not_equal(actual, expected)
    with np.errstate(over="ignore", invalid="ignore"):
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    diff = np.where(differ, np.maximum(diff, 1.0), 0.0)
    abs_e = np.abs(expected.astype(np.float64))
    rel = np.where(abs_e > 0, diff / np.where(abs_e > 0, abs_e, 1.0), np.where(diff > 0, np.inf, 0.0))
    mismatches = int(np.count_nonzero(differ))
    worst_flat = int(np.argmax(diff))
    return ErrorStats(
        passed=mismatches == 0, max_abs=float(diff.reshape(-1)[worst_flat]), max_rel=float(rel.max()),
        mean_abs=float(diff.mean()), mismatch_fraction=mismatches / actual.size,
        worst_index=tuple(int(i) for i in np.unravel_index(worst_flat, actual.shape)), nonfinite_mismatch=0,
        shape_mismatch=False, rtol=tol.rtol, atol=tol.atol, expected_absmax=float(abs_e.max()),
        ratio=float("inf") if mismatches else 0.0)  # nothing is allowed: any difference is infinitely far


def _finite_stats(diff: np.ndarray, abs_e: np.ndarray, tol: Tolerance) -> ErrorStats:
    expected_absmax = float(abs_e.max())
    atol = tol.atol * max(1.0, expected_absmax) if tol.scale_atol else tol.atol
    allowed = abs_e * np.float32(tol.rtol)
    allowed += np.float32(atol)
    cap = tol.cap(expected_absmax)
    if math.isfinite(cap):
        np.minimum(allowed, np.float32(cap), out=allowed)
    mismatches = int(np.count_nonzero(diff > allowed))
    worst_flat = int(np.argmax(diff))
    zero = abs_e == 0
    rel = np.divide(diff, abs_e, out=np.zeros_like(diff), where=~zero)
    max_rel = float("inf") if np.any(diff[zero] > 0) else float(rel.max())
    return ErrorStats(
        ratio=_ratio_max(diff, allowed, rel),
        passed=mismatches == 0,
        max_abs=float(diff.reshape(-1)[worst_flat]),
        max_rel=max_rel,
        mean_abs=float(diff.mean(dtype=np.float64)),
        mismatch_fraction=mismatches / diff.size,
        worst_index=tuple(int(i) for i in np.unravel_index(worst_flat, diff.shape)),
        nonfinite_mismatch=0,
        rtol=tol.rtol,
        atol=atol,
        expected_absmax=expected_absmax,
        cap=cap,
    )


def _general_stats(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> ErrorStats:
    """Any dtype, non-finite values handled explicitly; computed in float64."""
    a = actual.astype(np.float64, copy=False)
    e = expected.astype(np.float64, copy=False)
    a_fin, e_fin = np.isfinite(a), np.isfinite(e)
    both_finite = a_fin & e_fin
    # Non-finite values match only the same non-finite value (NaN~NaN, +Inf~+Inf).
    same_nonfinite = (~a_fin & ~e_fin) & ((np.isnan(a) & np.isnan(e)) | (a == e))
    nonfinite_mismatch = int(np.count_nonzero(~both_finite & ~same_nonfinite))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(both_finite, np.abs(a - e), 0.0)
        abs_e = np.where(both_finite, np.abs(e), 0.0)
        atol = tol.atol * max(1.0, float(abs_e.max())) if tol.scale_atol else tol.atol
        cap = tol.cap(float(abs_e.max()) if abs_e.size else 0.0)
        allowed = np.minimum(atol + tol.rtol * abs_e, cap)
        ok = both_finite & (diff <= allowed) | same_nonfinite
        rel = np.where(abs_e > 0, diff / np.where(abs_e > 0, abs_e, 1.0), np.where(diff > 0, np.inf, 0.0))
        ratios = np.where(allowed > 0, diff / np.where(allowed > 0, allowed, 1.0), np.where(diff > 0, np.inf, 0.0))
    ratios = np.where(both_finite, ratios, np.where(same_nonfinite, 0.0, np.inf))
    mismatches = int(a.size - np.count_nonzero(ok))
    if nonfinite_mismatch:
        max_abs = float("inf")
        worst_flat = int(np.argmax(~both_finite & ~same_nonfinite))
    else:
        worst_flat = int(np.argmax(diff))
        max_abs = float(diff.reshape(-1)[worst_flat])
    return ErrorStats(
        passed=mismatches == 0,
        max_abs=max_abs,
        max_rel=float(rel.max()) if rel.size else 0.0,
        mean_abs=float(diff.mean()),
        mismatch_fraction=mismatches / a.size,
        worst_index=tuple(int(i) for i in np.unravel_index(worst_flat, a.shape)),
        nonfinite_mismatch=nonfinite_mismatch,
        shape_mismatch=False,
        rtol=tol.rtol,
        atol=atol,
        expected_absmax=float(abs_e.max()),
        cap=cap,
        ratio=float(ratios.max()),
    )


def _ratio_max(diff: np.ndarray, allowed: np.ndarray, scratch: np.ndarray) -> float:
    """The largest diff / allowed (finite arrays of one dtype); a difference where nothing is allowed is inf.
    ``scratch`` (same shape and dtype) is overwritten: no third temporary array."""
    nothing = allowed <= 0
    np.divide(diff, allowed, out=scratch, where=~nothing)
    if nothing.any():
        scratch[nothing] = np.where(diff[nothing] > 0, np.inf, 0.0)
    return float(scratch.max())


def worst(stats: list[ErrorStats]) -> ErrorStats | None:
    """The worst of several comparisons (first failing by error ratio, else largest error)."""
    if not stats:
        return None
    return max(stats, key=lambda s: (not s.passed, s.shape_mismatch, s.nonfinite_mismatch, s.error_ratio, s.max_abs))


@dataclass(frozen=True)
class SampleStats:
    """:class:`ErrorStats`' numbers for each sample (axis 0) of a batch, as arrays of one length."""

    max_abs: np.ndarray
    max_rel: np.ndarray
    mean_abs: np.ndarray
    mismatch_fraction: np.ndarray
    error_ratio: np.ndarray
    passed: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.passed)


def per_sample(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> SampleStats:
    """``compare_arrays(actual[i:i+1], expected[i:i+1], tol)`` for every sample i, in a few vectorized operations
    when the float32 fast path applies (finite floats, no ceiling, no scaled atol), sample by sample otherwise.
    The arrays must have the same shape with at least one axis."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape or expected.ndim == 0:
        raise ValueError(f"per_sample needs two batches of one shape, got {actual.shape} and {expected.shape}")
    fast = per_sample_vectorized(actual, expected, tol)
    if fast is not None:
        return fast
    stats = [compare_arrays(actual[i:i + 1], expected[i:i + 1], tol) for i in range(expected.shape[0])]

    def column(field: str) -> np.ndarray:
        return np.array([getattr(s, field) for s in stats], dtype=np.float64)

    return SampleStats(column("max_abs"), column("max_rel"), column("mean_abs"), column("mismatch_fraction"),
                       column("error_ratio"), np.array([s.passed for s in stats], dtype=bool))


def per_sample_vectorized(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> SampleStats | None:
    """:func:`per_sample` when its vectorized path applies, else None (the caller may split the batch first)."""
    if (expected.size == 0 or tol.scale_atol or tol.noise_ceiling is not None
            or np.result_type(actual.dtype, expected.dtype) not in (np.float16, np.float32)):
        return None
    n = expected.shape[0]
    a = actual.astype(np.float32, copy=False).reshape(n, -1)
    e = expected.astype(np.float32, copy=False).reshape(n, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        diff = np.abs(a - e)
    if not np.isfinite(diff).all():
        return None  # a non-finite value: the general path, sample by sample
    abs_e = np.abs(e)
    with np.errstate(over="ignore"):  # a tolerance past float32's range is an infinite one, not a warning on stderr
        allowed = abs_e * np.float32(tol.rtol)
        allowed += np.float32(tol.atol)
    mismatch = np.count_nonzero(diff > allowed, axis=1)
    max_abs = diff.max(axis=1)
    zero = abs_e == 0
    rel = np.divide(diff, abs_e, out=np.zeros_like(diff), where=~zero)
    max_rel = np.where(np.any(zero & (diff > 0), axis=1), np.inf, rel.max(axis=1))
    nothing = allowed <= 0
    np.divide(diff, allowed, out=rel, where=~nothing)
    if nothing.any():
        rel[nothing] = np.where(diff[nothing] > 0, np.inf, 0.0)
    return SampleStats(max_abs.astype(np.float64), max_rel.astype(np.float64), diff.mean(axis=1, dtype=np.float64),
                       mismatch / diff.shape[1], rel.max(axis=1).astype(np.float64), mismatch == 0)
