"""`gapcheck drift`: is the current split distributed like the reference? Honest about effect sizes.

A job on the engines: every shard of either side becomes a :class:`SidePartial` (exact counts,
nulls, sums, category counts, a KLL sketch, and a seeded bottom-k row sample); partials merge in
shard order; the tests below run once on the merged value.

- numeric features: two-sample KS (scipy) on the row samples with the effect sizes beside the
  p-value — KS D and the Wasserstein distance in reference-std units;
- categorical features: chi-square on the exact category counts with Cramér's V;
- Benjamini–Hochberg over all features; a ``drift`` finding needs q < threshold AND effect ≥ minimum,
  so a million rows do not flag noise;
- ``missing_values_shift``: the null rate moved by at least ``min_null_shift`` (and a two-proportion
  test agrees);
- ±inf values are set aside from the tests above and compared as their own share of the rows, like the
  nulls (``infinite_values_shift``; a steady share is ``infinite_values``, info, with the counts);
- coverage: the current split's share in each decile of the reference (``coverage_gap`` when a bin
  holds under a fifth of its expected share) — visible even when KS is quiet;
- ISO date text (a CSV has no date type) is read as dates on the workers (:mod:`gapcheck.data.columns`) and tested
  as numbers: a time-ordered split by it is ``time_ordered_split``, whatever the column's name; dates on one side
  only, or a share of cells that are no date that moved, is ``drift`` (dates written another way).
Image folders are compared on per-image properties (per-channel mean/std, brightness, size, aspect).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gapcheck.data.columns import DATE_CELLS as DATE_CELLS_KEY
from gapcheck.data.common import empty_keyed, merge_keyed
from gapcheck.data.features import SidePartial, side_partial
from gapcheck.data.identifiers import IdentifierVerdict, Sentinel, TimeOrder
from gapcheck.data.sketches import MAX_CATEGORIES, SAMPLE_SIZE, ColumnStats, kll_ks_distance
from gapcheck.findings import Finding

if TYPE_CHECKING:
    from gapcheck.groups.data import DriftSpec

SIDES = ("reference", "current")
BINS = 10
COVERAGE_FLOOR = 0.2  # a bin holding under 20% of its expected share is a coverage gap
MIN_EXPECTED_IN_BIN = 25  # ...when enough current values were expected there to tell


@dataclass(frozen=True)
class DriftOptions:
    p_threshold: float = 0.01
    min_effect: float = 0.1
    min_null_shift: float = 0.05
    columns: tuple[str, ...] | None = None
    seed: int = 0
    sample_size: int = SAMPLE_SIZE
    # drift_underpowered (info) marks features whose smallest detectable effect exceeds min_effect; with this set
    # it is a gap instead (the pytest plugin's --gapcheck-fail-underpowered)
    fail_underpowered: bool = False

    def __post_init__(self) -> None:
        check_fraction("p_threshold", self.p_threshold, open_low=True, open_high=True)
        check_finite("min_effect", self.min_effect)
        check_fraction("min_null_shift", self.min_null_shift)
        if self.sample_size < 2:
            from gapcheck.errors import UsageError
            raise UsageError(f"the sample size must be at least 2, got {self.sample_size}", parameter="sample_size")

    @classmethod
    def from_spec(cls, spec: DriftSpec) -> DriftOptions:
        """The options a resolved :class:`~gapcheck.groups.data.DriftSpec` describes (a field it leaves None takes
        the default here, the only one)."""
        given: dict[str, Any] = {"p_threshold": spec.p_threshold, "min_effect": spec.min_effect,
                                 "columns": spec.columns or None, "seed": spec.seed,
                                 "fail_underpowered": spec.fail_underpowered}
        return cls(**{k: v for k, v in given.items() if v is not None})


def check_finite(name: str, value: object, low: float = 0.0) -> None:
    """``value`` is a finite number ≥ ``low`` (NaN compares false with everything: it would switch a check off)."""
    from gapcheck.errors import UsageError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
        raise UsageError(f"{name} must be a finite number ≥ {low:g}, got {value!r}", parameter=name)


def check_fraction(name: str, value: object, *, open_low: bool = False, open_high: bool = False) -> None:
    """``value`` is a finite number in [0, 1] (bounds excluded where asked)."""
    from gapcheck.errors import UsageError

    check_finite(name, value)
    number = float(value)  # type: ignore[arg-type]
    if number > 1 or (open_low and number == 0) or (open_high and number == 1):
        low, high = "(" if open_low else "[", ")" if open_high else "]"
        raise UsageError(f"{name} must be in {low}0, 1{high}, got {value!r}", parameter=name)


@dataclass(frozen=True)
class FeatureDrift:
    """The comparison of one feature (every number a person needs to judge it)."""

    feature: str
    null_rate_reference: float
    null_rate_current: float
    kind: str = "unusable"  # "numeric" (ISO date text too: microseconds) | "categorical" | "unusable"
    test: str = "none"  # "ks" | "chi2" | "none"
    n_reference: int = 0
    n_current: int = 0
    statistic: float | None = None
    p_value: float | None = None
    q_value: float | None = None
    ks_d: float | None = None
    wasserstein_std: float | None = None
    cramers_v: float | None = None
    effect: float | None = None
    mean_reference: float | None = None
    mean_current: float | None = None
    std_reference: float | None = None
    std_current: float | None = None
    coverage: tuple[float, ...] = ()
    coverage_reference: tuple[float, ...] = ()  # the reference's own share of each bin (ties make bins unequal)
    drift: bool = False
    ks_d_sketch: float | None = None  # from the KLL sketches (views only: KLL is not seeded, see sketches.py)
    # the smallest effect (KS D or Cramér's V) the test can call significant at the p-threshold with these sample
    # sizes (see min_detectable_d / min_detectable_v); underpowered: it exceeds the minimum effect
    min_detectable_effect: float | None = None
    underpowered: bool = False
    # why the column looks like an identifier (gapcheck.data.identifiers): tested and shown, but out of BH and the
    # verdict; None for a feature
    identifier: str | None = None
    # values an identifier's numbering holds apart from its range (-1, 999999999 "unknown"): set aside from its test
    # and moments, with the rows of each side's sample holding them
    sentinels: tuple[Sentinel, ...] = ()
    # why the column is the clock of a time-ordered split (gapcheck.data.identifiers.time_order): tested and
    # shown, said as time_ordered_split, out of BH and the verdict; None otherwise
    time_order: str | None = None
    clock: TimeOrder | None = None  # ...and its cut, ties and values on the wrong side of it (the finding's evidence)
    # ±inf values per side: set aside from the tests above (n_reference / n_current count finite values only) and
    # compared as their own share of the rows, like the missing values (infinite_values_shift)
    infinite_reference: int = 0
    infinite_current: int = 0
    infinite_rate_reference: float = 0.0
    infinite_rate_current: float = 0.0

    @property
    def left_out(self) -> bool:
        """Out of the drift verdict: an identifier, or the clock of a time-ordered split."""
        return bool(self.identifier or self.time_order)


def min_detectable_d(n: int, m: int, alpha: float) -> float | None:
    """The smallest two-sample KS D significant at ``alpha`` for sample sizes n and m (the asymptotic critical
    value ``sqrt(-ln(alpha / 2) / 2) · sqrt((n + m) / (n m))``; a true effect of this size is found about half the
    time, and Benjamini–Hochberg over many features can only raise it)."""
    if n < 1 or m < 1:
        return None
    return min(1.0, math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m)))


def min_detectable_v(total: float, categories: int, alpha: float) -> float | None:
    """The smallest Cramér's V a 2 × ``categories`` chi-square test calls significant at ``alpha`` with ``total``
    counted values: ``sqrt(chi2_{1-alpha, k-1} / N)``."""
    from scipy import stats

    if categories < 2 or total <= 0:
        return None
    return min(1.0, math.sqrt(float(stats.chi2.ppf(1 - alpha, categories - 1)) / total))


def drift_task(payload: dict[str, Any]) -> dict[str, SidePartial]:
    """One shard → ``{side: SidePartial}`` (module level: every engine can ship it). Tables are read with their
    ISO date text as dates (:func:`gapcheck.data.columns.text_dates`): CSV chunk by chunk, parquet's text columns
    that may hold dates read once more."""
    from gapcheck.data.columns import date_csv_partial, parquet_dates

    side, source = payload["side"], payload["source"]
    args = (payload["columns"], payload["seed"], payload["k"])
    table = source.get("kind") == "table" and source.get("sample_kind") != "images"
    if table and source.get("format") == "csv":
        return {side: date_csv_partial(source, *args)}
    partial = side_partial(source, *args)
    if table and source.get("format") in ("parquet", "pq"):
        partial = parquet_dates(partial, source, payload["seed"], payload["k"])
    return {side: partial}


empty_partial = empty_keyed  # the engines' empty and merge of {key: partial} (gapcheck.data.common)
merge_partials = merge_keyed


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """BH-adjusted q-values (monotone, capped at 1), in the input order."""
    n = len(p_values)
    if not n:
        return []
    order = np.argsort(p_values, kind="stable")
    ranked = np.asarray(p_values, dtype=np.float64)[order] * n / np.arange(1, n + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    q = np.empty(n)
    q[order] = np.minimum(adjusted, 1.0)
    return q.tolist()


def compare_feature(name: str, ref: ColumnStats, cur: ColumnStats, ref_sample: np.ndarray, cur_sample: np.ndarray,
                    options: DriftOptions) -> FeatureDrift:
    """The test, effect sizes and coverage of one feature (q-value and verdict are filled in after BH)."""
    from scipy import stats

    from gapcheck.data.columns import date_cells

    base = FeatureDrift(feature=name, null_rate_reference=_rate(ref), null_rate_current=_rate(cur),
                        infinite_reference=ref.infinite, infinite_current=cur.infinite,
                        infinite_rate_reference=ref.infinite / ref.rows if ref.rows else 0.0,
                        infinite_rate_current=cur.infinite / cur.rows if cur.rows else 0.0)
    if ref.numeric + ref.text == 0 or cur.numeric + cur.text == 0:
        return base  # all-null or all-infinite on a side: reported as bad input, nothing to test
    if ref.is_numeric and cur.is_numeric:
        a, b = np.sort(ref_sample[np.isfinite(ref_sample)]), np.sort(cur_sample[np.isfinite(cur_sample)])
        moments = dataclasses.replace(base, n_reference=len(a), n_current=len(b), mean_reference=ref.mean,
                                      mean_current=cur.mean, std_reference=ref.std, std_current=cur.std)
        if len(a) == 0 or len(b) == 0:
            return moments
        d, p_value, distance = sorted_ks_wasserstein(a, b)
        scale = ref.std if _resolved(ref) else None  # a constant reference has no spread to measure in
        w = distance / scale if scale else None
        reference_share, current_share = coverage(a, b)
        return dataclasses.replace(moments, kind="numeric", test="ks", statistic=d, p_value=p_value, ks_d=d,
                                   wasserstein_std=w, effect=max(d, w or 0.0), coverage=current_share,
                                   coverage_reference=reference_share,
                                   ks_d_sketch=kll_ks_distance(ref.kll, cur.kll),
                                   min_detectable_effect=min_detectable_d(len(a), len(b), options.p_threshold))
    if ref.is_numeric != cur.is_numeric:
        # dates on one side and text on the other is the column written another way (a serving side that writes
        # 03/14/2024 where training read 2024-03-14): a gap, though no test can compare them (it passed, untested);
        # numbers against text is reported by unusable_columns, nothing to test
        return dataclasses.replace(base, drift=bool(date_cells(ref) or date_cells(cur)))
    counted = dataclasses.replace(base, kind="categorical", n_reference=ref.rows - ref.nulls,
                                  n_current=cur.rows - cur.nulls)
    if ref.overflow or cur.overflow or not ref.categories or not cur.categories:
        return counted  # over MAX_CATEGORIES distinct values (an id-like column), or nothing counted: not tested
    keys = sorted(set(ref.categories) | set(cur.categories))
    table = np.array([[ref.categories.get(k, 0) for k in keys], [cur.categories.get(k, 0) for k in keys]], float)
    n = float(table.sum())
    chi2, p = (0.0, 1.0) if len(keys) < 2 else stats.chi2_contingency(table, correction=False)[:2]
    v = math.sqrt(chi2 / n) if n else 0.0  # 2 rows: min(r, c) - 1 = 1
    return dataclasses.replace(counted, test="chi2", statistic=float(chi2), p_value=float(p), cramers_v=v, effect=v,
                               min_detectable_effect=min_detectable_v(n, len(keys), options.p_threshold))


KS_EXACT_MAX_N = 10_000  # scipy's ks_2samp 'auto' computes the exact p-value up to this sample size


def sorted_ks_wasserstein(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(KS D, two-sided p-value, Wasserstein-1 distance) of two SORTED samples — the numbers of scipy's
    ``ks_2samp`` (method 'auto') and ``wasserstein_distance``, computed from one sort per sample instead of the
    four those functions do between them (on 1,000-column tables the tests were the driver's cost)."""
    from scipy import stats

    merged = np.concatenate([a, b])
    merged.sort(kind="mergesort")
    cdf_a = np.searchsorted(a, merged, side="right") / len(a)
    cdf_b = np.searchsorted(b, merged, side="right") / len(b)
    diffs = cdf_a - cdf_b  # at every sample value: the points ks_2samp looks at, in sorted order
    distance = float(np.sum(np.multiply(np.abs(diffs[:-1]), np.diff(merged))))
    if max(len(a), len(b)) <= KS_EXACT_MAX_N:  # small: scipy's exact p-value, sorting is cheap
        exact = stats.ks_2samp(a, b)
        return float(exact.statistic), float(exact.pvalue), distance
    d = float(max(np.clip(-diffs.min(), 0, 1), diffs.max()))
    m, n = sorted([float(len(a)), float(len(b))], reverse=True)
    p_value = float(np.clip(stats.kstwo.sf(d, np.round(m * n / (m + n))), 0, 1))
    return d, p_value, distance


def coverage(reference: np.ndarray, current: np.ndarray,
             bins: int = BINS) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(reference share, current share) in each quantile bin of ``reference``.

    Ties collapse bins (a binary feature has two, a pixel that is mostly 0 a large first one), so the
    reference's own shares are returned beside the current's: a bin is judged against what the reference
    holds there, never against 1/bins. Bins the reference leaves empty are dropped."""
    edges = np.unique(np.quantile(reference, np.linspace(0, 1, bins + 1)[1:-1]))
    ref_counts = np.bincount(np.searchsorted(edges, reference, side="right"), minlength=len(edges) + 1)
    cur_counts = np.bincount(np.searchsorted(edges, current, side="right"), minlength=len(edges) + 1)
    keep = ref_counts > 0
    return (tuple(float(c) / len(reference) for c in ref_counts[keep]),
            tuple(float(c) / len(current) for c in cur_counts[keep]))


STD_RESOLUTION = 1e-7  # a std below this share of the values' magnitude is the float sums' rounding, not spread


def _resolved(stats: ColumnStats) -> bool:
    """Whether ``stats``' std is a spread an effect can be scaled by: finite and above the rounding of the sums it
    comes from (sqrt of float64's epsilon, ~1.5e-8, of the magnitude; a constant column is exactly 0)."""
    std = stats.std
    magnitude = max(abs(stats.low), abs(stats.high))
    return math.isfinite(std) and std > 0 and (not math.isfinite(magnitude) or std > STD_RESOLUTION * magnitude)


def _rate(stats: ColumnStats) -> float:
    return stats.nulls / stats.rows if stats.rows else 0.0


EXACT_BELOW_EXPECTED = 5.0  # the textbook rule: under 5 expected in a cell the z-test's normal tail is wrong


def _expected_min(nulls: float, n1: int, n2: int) -> float:
    """The smallest expected count of the 2×2 table (side × missing or not) under no change."""
    total = n1 + n2
    return min(nulls, total - nulls) * min(n1, n2) / total


def null_shift_p(ref: ColumnStats, cur: ColumnStats) -> float:
    """Two-sided p-value for a change of the null rate: the two-proportion z-test, or Fisher's exact test where a
    cell expects under 5 rows (1 missing of 20 against 0 of 549 has z-test p ≈ 1e-6 but exact p = 0.035: the
    z-test called one missing value in a 20-row split a ``missing_values_shift``)."""
    from scipy import stats

    n1, n2 = ref.rows, cur.rows
    if not n1 or not n2:
        return 1.0
    if _expected_min(ref.nulls + cur.nulls, n1, n2) < EXACT_BELOW_EXPECTED:
        a, b = round(ref.nulls), round(cur.nulls)
        return float(stats.fisher_exact([[a, n1 - a], [b, n2 - b]]).pvalue)
    pooled = (ref.nulls + cur.nulls) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 1.0 if ref.nulls / n1 == cur.nulls / n2 else 0.0
    z = abs(ref.nulls / n1 - cur.nulls / n2) / se
    return float(2 * stats.norm.sf(z))


def compare_sides(reference: SidePartial, current: SidePartial, options: DriftOptions) -> list[FeatureDrift]:
    """Every shared feature compared, BH-corrected, with the drift verdict set."""
    names = [n for n in reference.order if n in current.columns]
    features = [_marked(compare_feature(n, reference.columns[n], current.columns[n], reference.reservoir.columns[n],
                                        current.reservoir.columns[n], options), reference, current, options)
                for n in names]
    tested = [i for i, f in enumerate(features) if f.p_value is not None and not f.left_out]
    q_values = benjamini_hochberg([features[i].p_value for i in tested])  # type: ignore[misc]
    for i, q in zip(tested, q_values, strict=True):
        f = features[i]
        drift = q < options.p_threshold and (f.effect or 0.0) >= options.min_effect \
            or not_dates_shifted(reference.columns[f.feature], current.columns[f.feature], options)
        weak = not drift and f.min_detectable_effect is not None and f.min_detectable_effect > options.min_effect
        features[i] = dataclasses.replace(f, q_value=q, drift=drift, underpowered=weak)
    return features


def _marked(feature: FeatureDrift, reference: SidePartial, current: SidePartial, options: DriftOptions) -> FeatureDrift:
    """``feature`` with its identifier reason set when it looks like one and the user did not ask for it by name,
    or its time order when it is the clock of a time-ordered split. A column of ISO dates is a point in time
    whatever its name, and never an identifier (all-distinct timestamps were one, and a time split was hidden)."""
    from gapcheck.data.columns import date_cells
    from gapcheck.data.identifiers import identifier_verdict, time_order

    name = feature.feature
    if options.columns and name in options.columns:
        return feature
    ref, cur = reference.columns[name], current.columns[name]
    dates = bool(date_cells(ref) and date_cells(cur))
    verdict = None if dates else identifier_verdict(name, ref, cur, reference.reservoir.columns[name],
                                                    current.reservoir.columns[name])
    if verdict:
        return _identified(feature, verdict, reference, current, options)
    clock = time_order(name, ref, cur, dates=dates,
                       samples=(reference.reservoir.columns[name], current.reservoir.columns[name]))
    return dataclasses.replace(feature, time_order=clock.reason, clock=clock) if clock else feature


def _identified(feature: FeatureDrift, verdict: IdentifierVerdict, reference: SidePartial, current: SidePartial,
                options: DriftOptions) -> FeatureDrift:
    """``feature`` as an identifier; with sentinels, compared again without them (its moments, KS D and
    Wasserstein are the numbering's, not a 999999999's)."""
    from gapcheck.data.identifiers import without_sentinels

    name = feature.feature
    if verdict.sentinels:
        ref = without_sentinels(reference.columns[name], reference.reservoir.columns[name], verdict.sentinels)
        cur = without_sentinels(current.columns[name], current.reservoir.columns[name], verdict.sentinels)
        feature = compare_feature(name, ref[0], cur[0], ref[1], cur[1], options)
    return dataclasses.replace(feature, identifier=verdict.reason, sentinels=verdict.sentinels)


def coverage_gaps(feature: FeatureDrift, n_current: int) -> list[int]:
    """Bins of the reference the current split leaves (nearly) empty."""
    return [i for i, (share, expected) in enumerate(zip(feature.coverage, feature.coverage_reference, strict=True))
            if expected * n_current >= MIN_EXPECTED_IN_BIN and share < COVERAGE_FLOOR * expected]


def min_detectable_null_shift(rate: float, n: int, m: int, alpha: float) -> float | None:
    """The smallest change of a feature's missing-value rate, from the reference's ``rate`` toward 0.5 (the harder
    direction: the variance grows), that the two-proportion z-test (:func:`null_shift_p`) calls significant at
    ``alpha`` with n reference and m current rows; 1.0 when no change is (bisection on the exact z, 60 steps)."""
    from scipy import stats

    if n < 1 or m < 1:
        return None
    critical, weight, scale = float(stats.norm.isf(alpha / 2)), m / (n + m), 1 / n + 1 / m
    sign, room = (1.0, 1.0 - rate) if rate <= 0.5 else (-1.0, rate)

    def z(delta: float) -> float:
        pooled = rate + sign * delta * weight
        se = math.sqrt(max(pooled * (1 - pooled), 0.0) * scale)
        return delta / se if se > 0 else math.inf

    if room <= 0 or z(room) < critical:
        return _exact_detectable(rate, n, m, alpha, sign)
    low, high = 0.0, room
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (low, middle) if z(middle) >= critical else (middle, high)
    if _expected_min(rate * n + (rate + sign * high) * m, n, m) < EXACT_BELOW_EXPECTED:
        return _exact_detectable(rate, n, m, alpha, sign)  # null_shift_p uses Fisher's test there
    return high


def _exact_detectable(rate: float, n: int, m: int, alpha: float, sign: float) -> float:
    """The smallest change, in whole current rows, that :func:`null_shift_p` calls significant (1.0 when none):
    bisection on the count, the p-value falling as the count moves away from the reference's rate."""
    from types import SimpleNamespace

    ref = SimpleNamespace(rows=n, nulls=round(rate * n))
    start = math.ceil(rate * m) if sign > 0 else math.floor(rate * m)
    stop = m if sign > 0 else 0

    def significant(k: int) -> bool:
        return null_shift_p(ref, SimpleNamespace(rows=m, nulls=k)) < alpha  # type: ignore[arg-type]

    if not significant(stop):
        return 1.0
    low, high = start, stop  # significant(high) holds throughout
    while abs(high - low) > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if significant(middle) else (middle, high)
    return abs(high / m - rate)


def null_underpowered_findings(features: list[FeatureDrift], reference: SidePartial, current: SidePartial,
                               options: DriftOptions) -> list[Finding]:
    """``drift_underpowered`` for the missing-values test, as for the distribution tests: features whose null-rate
    change of ``min_null_shift`` the z-test could not have called significant with these row counts (one finding
    per pair of row counts, naming every feature and its smallest detectable change)."""
    from gapcheck.codes import data as codes
    from gapcheck.findings import Severity, Subject

    groups: dict[tuple[int, int], dict[str, float]] = {}
    for f in features:
        if f.left_out:  # not a feature (identifier_column / time_ordered_split says so); never listed as one
            continue
        ref, cur = reference.columns[f.feature], current.columns[f.feature]
        detectable = min_detectable_null_shift(f.null_rate_reference, ref.rows, cur.rows, options.p_threshold)
        if detectable is not None and detectable > options.min_null_shift:
            groups.setdefault((ref.rows, cur.rows), {})[f.feature] = round(detectable, 6)
    findings: list[Finding] = []
    for (n_ref, n_cur), weak in groups.items():
        low, high = min(weak.values()), max(weak.values())
        span = f"{low:.3f}" if high - low < 5e-4 else f"{low:.3f}–{high:.3f}"
        names = ", ".join(list(weak)[:5]) + (f" and {len(weak) - 5} more" if len(weak) > 5 else "")
        findings.append(codes.DRIFT_UNDERPOWERED.finding(
            f"{len(weak)} feature(s) ({names}): with {n_ref} reference and {n_cur} current row(s) the missing-values "
            f"test at p < {options.p_threshold:g} detects only a change of the missing rate ≥ {span}, above the "
            f"minimum {options.min_null_shift:g}: a change that size would pass unseen",
            subject=Subject(stage="reference→current", output=next(iter(weak)) if len(weak) == 1 else None),
            severity=Severity.GAP if options.fail_underpowered else None,
            evidence={"test": "null_rate", "n_reference": n_ref, "n_current": n_cur,
                      "p_threshold": options.p_threshold, "min_effect": options.min_null_shift, "features": len(weak),
                      "min_detectable_effect": dict(list(weak.items())[:MAX_LISTED_FEATURES])}))
    return findings


def drift_findings(features: list[FeatureDrift], reference: SidePartial, current: SidePartial,
                   options: DriftOptions, images: bool = False) -> list[Finding]:
    """The findings of compared features; ``images``: image properties, never missing (an image that cannot be
    decoded is bad input), so the missing-values test's power is not theirs to state."""
    from gapcheck.codes import data as codes
    from gapcheck.findings import Subject

    findings: list[Finding] = underpowered_findings(features, options)
    if not images:
        findings += null_underpowered_findings(features, reference, current, options)
    findings += orientation_findings(reference, current)
    for f in features:
        subject = Subject(stage="reference→current", output=f.feature)
        if f.identifier:
            findings.append(_identifier_finding(f, subject))
        if f.time_order:
            findings.append(_time_order_finding(f, subject, reference.columns[f.feature], current.columns[f.feature]))
        ref, cur = reference.columns[f.feature], current.columns[f.feature]
        findings += _drift_of(f, ref, cur, subject, options)
        shift = abs(f.null_rate_current - f.null_rate_reference)
        if shift >= options.min_null_shift and null_shift_p(ref, cur) < options.p_threshold:
            findings.append(codes.MISSING_VALUES_SHIFT.finding(
                f"{f.feature}: missing values {f.null_rate_reference:.1%} in the reference, {f.null_rate_current:.1%} now",
                subject=subject, evidence={"null_rate_reference": f.null_rate_reference,
                                           "null_rate_current": f.null_rate_current}))
        findings += infinite_findings(f, ref, cur, subject, options)
        gaps = coverage_gaps(f, f.n_current) if not f.left_out else []
        if gaps:
            findings.append(codes.COVERAGE_GAP.finding(
                f"{f.feature}: the current split leaves reference quantile bin(s) "
                f"{', '.join(f'{g + 1} ({f.coverage_reference[g]:.0%} of the reference, {f.coverage[g]:.1%} here)' for g in gaps)} "
                f"(nearly) empty", subject=subject,
                evidence={"empty_bins": [g + 1 for g in gaps], "coverage": list(f.coverage),
                          "coverage_reference": list(f.coverage_reference)}))
    return findings


def _drift_of(f: FeatureDrift, ref: ColumnStats, cur: ColumnStats, subject: Any, options: DriftOptions) -> list[Finding]:
    """A feature's ``drift`` gaps: its distribution shifted, it is dates on one side only, or the share of its
    cells that are no ISO date moved (a serving side that writes some dates another way)."""
    from gapcheck.codes import data as codes

    if f.drift and f.test == "none":
        return [_written_otherwise(f, ref, cur, subject)]
    findings = [_not_dates_finding(f.feature, ref, cur, subject)] if not_dates_shifted(ref, cur, options) else []
    if f.drift and f.q_value is not None and f.q_value < options.p_threshold and (f.effect or 0.0) >= options.min_effect:
        what = _shift_measures(f)
        findings.append(codes.DRIFT.finding(
            f"{f.feature} shifted: {what} (q={f.q_value:.2g} < {options.p_threshold}, effect ≥ {options.min_effect})",
            subject=subject, evidence={"test": f.test, "p_value": f.p_value, "q_value": f.q_value, "ks_d": f.ks_d,
                                       "wasserstein_std": f.wasserstein_std, "cramers_v": f.cramers_v,
                                       "mean_reference": f.mean_reference, "mean_current": f.mean_current,
                                       "n_reference": f.n_reference, "n_current": f.n_current}))
    return findings


def _not_dates_share(stats: ColumnStats) -> tuple[int, int]:
    """(cells that are no ISO date, non-missing cells) of a date column (its text cells are those)."""
    return stats.text, stats.numeric + stats.infinite + stats.text


def not_dates_shifted(ref: ColumnStats, cur: ColumnStats, options: DriftOptions) -> bool:
    """Both sides are date columns and the share of their cells that are no ISO date moved as a missing-values
    shift would have to (at least ``min_null_shift``, and significant): 8% of the current split written 03/14/2024
    stays a date column, its KS test on the other 92% quiet, and 6% 'unknown' in a reference none in the current."""
    from types import SimpleNamespace

    from gapcheck.data.columns import date_cells

    if not (date_cells(ref) and date_cells(cur)):
        return False
    (bad_ref, all_ref), (bad_cur, all_cur) = _not_dates_share(ref), _not_dates_share(cur)
    if abs(bad_ref / all_ref - bad_cur / all_cur) < options.min_null_shift:
        return False
    counts = [SimpleNamespace(rows=cells, nulls=bad) for bad, cells in ((bad_ref, all_ref), (bad_cur, all_cur))]
    return null_shift_p(*counts) < options.p_threshold  # type: ignore[arg-type]


def _not_dates_finding(name: str, ref: ColumnStats, cur: ColumnStats, subject: Any) -> Finding:
    from gapcheck.codes import data as codes

    (bad_ref, all_ref), (bad_cur, all_cur) = _not_dates_share(ref), _not_dates_share(cur)
    examples = _not_dates(cur if bad_cur / all_cur > bad_ref / all_ref else ref)
    said = f", e.g. {', '.join(repr(e) for e in examples)}" if examples else ""
    return codes.DRIFT.finding(
        f"{name}: cells that are no ISO date {bad_ref / all_ref:.1%} of the reference's ({bad_ref} of {all_ref}), "
        f"{bad_cur / all_cur:.1%} of the current split's ({bad_cur} of {all_cur}){said}: dates written another way "
        f"or lost on one side (set aside from the tests)", subject=subject,
        evidence={"test": "not_dates_share", "not_dates_reference": bad_ref, "cells_reference": all_ref,
                  "not_dates_current": bad_cur, "cells_current": all_cur, "examples": examples})


def infinite_findings(f: FeatureDrift, ref: ColumnStats, cur: ColumnStats, subject: Any,
                      options: DriftOptions) -> list[Finding]:
    """±inf values, never dropped unsaid: ``infinite_values_shift`` (a gap) when their share of the rows moved as a
    missing-values shift would have to (at least ``min_null_shift``, and significant), else ``infinite_values``
    (info) saying how many were set aside from the tests."""
    from types import SimpleNamespace

    from gapcheck.codes import data as codes

    if not (ref.infinite or cur.infinite):
        return []
    said = (f"{ref.infinite} of {ref.rows} reference and {cur.infinite} of {cur.rows} current value(s) are ±inf "
            f"({f.infinite_rate_reference:.1%} → {f.infinite_rate_current:.1%}), set aside from the tests"
            + (f" (the {f.test} test compared {f.n_reference} and {f.n_current} finite value(s))" if f.test != "none"
               else " (no finite values to test on a side)"))
    evidence = {"infinite_reference": ref.infinite, "infinite_current": cur.infinite, "rows_reference": ref.rows,
                "rows_current": cur.rows, "infinite_rate_reference": f.infinite_rate_reference,
                "infinite_rate_current": f.infinite_rate_current, "n_reference": f.n_reference,
                "n_current": f.n_current}
    shift = abs(f.infinite_rate_current - f.infinite_rate_reference)
    counts = [SimpleNamespace(rows=s.rows, nulls=s.infinite) for s in (ref, cur)]
    if shift >= options.min_null_shift and null_shift_p(*counts) < options.p_threshold:  # type: ignore[arg-type]
        return [codes.INFINITE_VALUES_SHIFT.finding(f"{f.feature}: the share of infinite values moved: {said}",
                                                    subject=subject, evidence=evidence)]
    return [codes.INFINITE_VALUES.finding(f"{f.feature}: {said}", subject=subject, evidence=evidence)]


ORIENTATION_SHARE_SHIFT = 0.05  # the sides' shares of EXIF-turned images differ by this much: said


def orientation_findings(reference: SidePartial, current: SidePartial) -> list[Finding]:
    """``exif_orientation_differs`` when one side's images are stored turned (an EXIF orientation tag) more often
    than the other's: measured as displayed they agree, but a loader ignoring the tag would not."""
    from gapcheck.codes import data as codes
    from gapcheck.findings import Subject

    turned = {"reference": sum(reference.orientations.values()), "current": sum(current.orientations.values())}
    rows = {"reference": reference.rows, "current": current.rows}
    if not all(rows.values()) or not any(turned.values()):
        return []
    shares = {side: turned[side] / rows[side] for side in rows}
    if abs(shares["reference"] - shares["current"]) < ORIENTATION_SHARE_SHIFT:
        return []
    tags = {side: part.orientations for side, part in (("reference", reference), ("current", current))}
    said = "; ".join(f"{side}: {turned[side]} of {rows[side]}" + (
        f" (tag {', '.join(f'{t}: {n}' for t, n in tags[side].items())})" if tags[side] else "") for side in rows)
    return [codes.EXIF_ORIENTATION_DIFFERS.finding(
        f"images stored turned with an EXIF orientation tag ({said}); measured as displayed (the tag applied), as a "
        f"viewer shows them; a loader that ignores the tag sees them turned", subject=Subject(stage="reference→current"),
        evidence={"turned": turned, "images": rows, "share": {k: round(v, 6) for k, v in shares.items()},
                  "orientation_tags": {side: {str(t): n for t, n in tags[side].items()} for side in rows}})]


def _written_otherwise(feature: FeatureDrift, reference: ColumnStats, current: ColumnStats, subject: Any) -> Finding:
    """The ``drift`` gap of a column that is dates on one side and text on the other: how much of the text side is
    no ISO date, with examples (the others are ISO dates too few to make it a date column)."""
    from gapcheck.codes import data as codes

    sides = {"reference": reference, "current": current}
    text_side = "reference" if current.is_numeric else "current"
    held = sides[text_side]
    filled = held.numeric + held.text
    others = filled - held.categories.get(DATE_CELLS_KEY, 0) if not held.overflow else None
    examples = _not_dates(held)
    whose = "the reference's" if text_side == "reference" else "the current split's"
    share = (f"{others} of {whose} {filled} cell(s) are no ISO date" if others is not None
             else f"over {MAX_CATEGORIES:,} distinct cells, first at rows {', '.join(held.bad_cells[:3])}")
    said = f"{share}, e.g. {', '.join(repr(e) for e in examples)}" if examples else share
    return codes.DRIFT.finding(
        f"{feature.feature}: {_holds(reference)} in the reference, {_holds(current)} in the current split ({said}): "
        f"the same column written another way (a date format that differs between training and serving); no test "
        f"can compare them", subject=subject,
        evidence={"test": "none", "reference": _holds(reference), "current": _holds(current),
                  "text_side": text_side, "cells": filled, "not_dates": others, "examples": examples,
                  "n_reference": feature.n_reference, "n_current": feature.n_current})


def _not_dates(stats: ColumnStats) -> list[str]:
    """Up to three cells of a column that hold no ISO date (its text categories), as written."""
    return [k for k in stats.categories if k not in (DATE_CELLS_KEY, "<number>")][:3]


def _identifier_finding(feature: FeatureDrift, subject: Any) -> Finding:
    from gapcheck.codes import data as codes

    measured = (f"KS D={feature.ks_d:.3f}" if feature.test == "ks" else
                f"Cramér's V={feature.cramers_v:.3f}" if feature.test == "chi2" else "not tested")
    return codes.IDENTIFIER_COLUMN.finding(
        f"{feature.feature} looks like an identifier ({feature.identifier}); excluded from the drift verdict "
        f"({measured}); --columns {feature.feature} to include it",
        subject=subject, evidence={"reason": feature.identifier, "test": feature.test, "ks_d": feature.ks_d,
                                   "cramers_v": feature.cramers_v, "p_value": feature.p_value,
                                   "sentinels": [dataclasses.asdict(s) | {"unsampled": list(s.unsampled)}
                                                 for s in feature.sentinels]})


def _time_order_finding(feature: FeatureDrift, subject: Any, reference: ColumnStats, current: ColumnStats) -> Finding:
    from gapcheck.codes import data as codes
    from gapcheck.data.columns import date_cells

    return codes.TIME_ORDERED_SPLIT.finding(
        f"{feature.feature}: {feature.time_order}: a time-ordered split, not drift (KS D={_fmt(feature.ks_d)}); left "
        f"out of the drift verdict, the other columns tested as ever; a model that reads {feature.feature} sees only "
        f"values it never trained on; --columns {feature.feature} to include it",
        subject=subject, evidence={"reason": feature.time_order, "ks_d": feature.ks_d, "p_value": feature.p_value,
                                   "mean_reference": feature.mean_reference, "mean_current": feature.mean_current,
                                   "dates": bool(date_cells(reference) and date_cells(current)),
                                   **_clock_evidence(feature.clock)})


def _clock_evidence(clock: TimeOrder | None) -> dict[str, Any]:
    """The cut of a time-ordered split and the sampled values tied at it or on its wrong side (a reference value
    after it, a current value before it), each side's count of the values it looked at beside them."""
    if clock is None:
        return {}
    return {"cut": clock.cut, "tied": dict(zip(SIDES, clock.tied, strict=True)),
            "out_of_order": dict(zip(SIDES, clock.out_of_order, strict=True)),
            "sampled": dict(zip(SIDES, clock.sampled, strict=True))}


MAX_LISTED_FEATURES = 200  # features named in one underpowered finding's evidence (the count is exact)


def underpowered_findings(features: list[FeatureDrift], options: DriftOptions) -> list[Finding]:
    """``drift_underpowered`` where the test could not have flagged a shift of the minimum effect: one finding per
    test and pair of sample sizes (features sharing them share the detectable effect), naming every feature;
    info, or a gap with ``fail_underpowered``."""
    from gapcheck.codes import data as codes
    from gapcheck.findings import Severity, Subject

    groups: dict[tuple[str, int, int], list[FeatureDrift]] = {}
    for f in features:
        if f.underpowered:
            groups.setdefault((f.test, f.n_reference, f.n_current), []).append(f)
    severity = Severity.GAP if options.fail_underpowered else None
    findings: list[Finding] = []
    for (test, n_ref, n_cur), weak in groups.items():
        measure = "KS D" if test == "ks" else "Cramér's V"
        detectable = {f.feature: round(f.min_detectable_effect or 0.0, 6) for f in weak}
        low, high = min(detectable.values()), max(detectable.values())
        span = f"{low:.3f}" if high - low < 5e-4 else f"{low:.3f}–{high:.3f}"
        names = ", ".join(f.feature for f in weak[:5]) + (f" and {len(weak) - 5} more" if len(weak) > 5 else "")
        findings.append(codes.DRIFT_UNDERPOWERED.finding(
            f"{len(weak)} feature(s) ({names}): with {n_ref} reference and {n_cur} current value(s) the {test} test "
            f"at p < {options.p_threshold:g} detects only {measure} ≥ {span}, above the minimum effect "
            f"{options.min_effect:g}: a shift that size would pass unseen",
            subject=Subject(stage="reference→current", output=weak[0].feature if len(weak) == 1 else None),
            severity=severity,
            evidence={"test": test, "n_reference": n_ref, "n_current": n_cur, "p_threshold": options.p_threshold,
                      "min_effect": options.min_effect, "features": len(weak),
                      "min_detectable_effect": dict(list(detectable.items())[:MAX_LISTED_FEATURES])}))
    return findings


def unusable_columns(reference: SidePartial, current: SidePartial,
                     requested: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """All-null columns, mixed-type columns, columns on one side only and requested columns on neither,
    as (item, reason) for bad_input."""
    problems: list[tuple[str, str]] = []
    for name in requested or ():
        if name not in reference.columns and name not in current.columns and (reference.rows or current.rows):
            problems.append((f"columns:{name}", "requested column not found on either side"))
    for side, part, other in (("reference", reference, current), ("current", current, reference)):
        for name in part.order:
            stats = part.columns[name]
            if stats.rows and stats.nulls == stats.rows:
                problems.append((f"{side}:{name}", "all values are missing (all-NaN column)"))
            elif stats.rows and stats.infinite and stats.nulls + stats.infinite == stats.rows:
                problems.append((f"{side}:{name}", f"no finite value: {stats.infinite} of {stats.rows} value(s) are "
                                 f"±inf" + (f", {stats.nulls} missing" if stats.nulls else " (all-infinite column)")))
            elif stats.is_numeric and stats.text:
                problems.append((f"{side}:{name}", _text_cells(stats)))
            if name not in other.columns and other.rows:
                problems.append((f"{side}:{name}", f"column only in the {side} split"))
            elif side == "reference" and name in other.columns and _filled(stats) and _filled(other.columns[name]) \
                    and stats.is_numeric != other.columns[name].is_numeric \
                    and "dates" not in (_holds(stats), _holds(other.columns[name])):  # a drift gap says those
                problems.append((f"columns:{name}", f"mixed column types: {_holds(stats)} in the reference, "
                                 f"{_holds(other.columns[name])} in the current split"))
    return problems


def _filled(stats: ColumnStats) -> bool:
    return stats.numeric + stats.text > 0


def _text_cells(stats: ColumnStats) -> str:
    """Why a numeric column's text cells are bad input; a date column's are cells that are no ISO date, said with
    what they hold (set aside from the tests like any text cell of a numeric column, never read as dates)."""
    from gapcheck.data.columns import date_cells

    rows = ", ".join(stats.bad_cells[:3])
    dates = date_cells(stats)
    if not dates:
        return f"mixed column types: {stats.text} text cell(s) in a numeric column, e.g. {rows}"
    held = [repr(k) for k in _not_dates(stats)]
    return (f"unparseable dates: {stats.text} of {stats.text + dates} cell(s) of a date column are not ISO dates "
            f"(set aside from the tests), e.g. {', '.join(held) or 'n/a'} (rows {rows})")


def _holds(stats: ColumnStats) -> str:
    from gapcheck.data.columns import date_cells

    return "dates" if date_cells(stats) else "numbers" if stats.is_numeric else "text"


def _shift_measures(f: FeatureDrift) -> str:
    """The effect sizes a drift finding states: the Wasserstein distance in reference stds, or, where the
    reference has no spread to scale by, what the values are (a Wasserstein of 16790224 "reference stds" said
    nothing: the std was the rounding of a constant)."""
    if f.test != "ks":
        return f"Cramér's V={f.cramers_v:.3f}"
    if f.wasserstein_std is not None:
        return f"KS D={f.ks_d:.3f}, Wasserstein={_fmt(f.wasserstein_std)} reference std"
    if f.std_reference == 0:
        current = (_g(f.mean_current) if f.std_current == 0
                   else f"mean {_g(f.mean_current)}, std {_g(f.std_current)}")
        return f"KS D={f.ks_d:.3f}; constant in the reference: {_g(f.mean_reference)}, current: {current}"
    return (f"KS D={f.ks_d:.3f}; the reference's spread is below the sums' precision (std {_g(f.std_reference)}): "
            f"mean {_g(f.mean_reference)} in the reference, {_g(f.mean_current)} now")


def _g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
