"""Mergeable partial statistics: exact where they must be, sketched with a stated bound where not.

- :class:`Reservoir`: a bottom-k sample by a *seeded hash of the item's name*. Keeping the k
  smallest hashes is a uniform random sample, and the merge (union, keep k smallest) is exact,
  associative and commutative: any sharding on any engine yields the same rows. KS p-values,
  Wasserstein distances, coverage and single-feature AUCs are computed on it (never on
  sketches: sketch-based KS p-values are erratic, whylogs#684). Its error is the sampling error;
  the DKW bound for the empirical CDF is ``sqrt(ln(2/0.05) / (2k))`` at 95%.
- :class:`ColumnStats`: exact counts, nulls, min/max, sums (merged in shard order, so float sums are
  bit-identical on every engine), category counts (exact up to a cap, then marked overflowed),
  and a datasketches KLL quantile sketch whose normalized rank error is stated, fed with up to
  :data:`KLL_SHARD_VALUES` sampled values per shard (all of a small shard's). KLL compaction
  flips an unseeded coin, so its estimates differ run to run within that bound; they are shown
  beside the exact-sample numbers and kept out of the JSON, which must be identical on every engine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SAMPLE_SIZE = 20_000
KLL_K = 200
# A shard feeds its KLL sketches at most this many values per column: its rows of smallest seeded priority (a
# uniform sample). Updating KLL costs ~50 ns a value, which on a 3M x 1,000 table would be most of the run.
KLL_SHARD_VALUES = 1_024
MAX_CATEGORIES = 1_000
MIXED_NUMERIC_SHARE = 0.9  # a text column whose cells are ≥ 90% numbers is numeric with bad cells


def name_priorities(names: list[str], seed: int) -> np.ndarray:
    """A seeded 64-bit hash per item name (vectorised; the same on every machine and engine)."""
    import pandas as pd

    key = f"gapcheck{seed:08d}"[-16:]
    # categorize=False: the same hashes (it only skips factorizing, which pays off for repeated values; names are
    # unique, and factorizing 250k of them cost 7x the hashing)
    return pd.util.hash_pandas_object(pd.Series(names, dtype=object), index=False, hash_key=key,
                                      categorize=False).to_numpy(np.uint64)


@dataclass
class Reservoir:
    """Bottom-k rows by seeded name hash; ``columns`` maps a column name to its sampled values."""

    k: int = SAMPLE_SIZE
    priorities: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    seen: int = 0

    @classmethod
    def of(cls, names: list[str], columns: dict[str, np.ndarray], seed: int, k: int = SAMPLE_SIZE) -> "Reservoir":
        priorities = name_priorities(names, seed) if names else np.zeros(0, np.uint64)
        return cls(k=k, priorities=priorities, columns=dict(columns), seen=len(names))._trim()

    def _trim(self) -> "Reservoir":
        """Keep the k smallest priorities, in priority order (the one canonical form, whatever the sharding)."""
        keep = np.argsort(self.priorities, kind="stable")[: self.k]
        self.priorities = self.priorities[keep]
        self.columns = {name: values[keep] for name, values in self.columns.items()}
        return self

    def merge(self, other: "Reservoir") -> "Reservoir":
        names = sorted(set(self.columns) | set(other.columns))
        # A full reservoir's largest priority bounds what can stay: rows above it are dropped before copying any
        # column (on a 1,000-column table the copies are the merge's cost).
        limits = [r.priorities[-1] for r in (self, other) if len(r.priorities) >= self.k and len(r.priorities)]
        parts = [_below(r, min(limits)) if limits else r for r in (self, other)]
        columns = {n: np.concatenate([_column(p, n) for p in parts]) for n in names}
        merged = Reservoir(k=self.k, priorities=np.concatenate([p.priorities for p in parts]), columns=columns,
                           seen=self.seen + other.seen)
        return merged._trim()  # by priority: the result does not depend on which side came first

    def dkw_bound(self, confidence: float = 0.95) -> float:
        n = len(self.priorities)
        return math.sqrt(math.log(2 / (1 - confidence)) / (2 * n)) if n else 1.0


def _below(reservoir: Reservoir, limit: Any) -> Reservoir:
    """The rows of ``reservoir`` whose priority is at most ``limit`` (all of them when none is above)."""
    keep = reservoir.priorities <= limit
    if keep.all():
        return reservoir
    return Reservoir(k=reservoir.k, priorities=reservoir.priorities[keep],
                     columns={n: v[keep] for n, v in reservoir.columns.items()}, seen=reservoir.seen)


def _column(reservoir: Reservoir, name: str) -> np.ndarray:
    if name in reservoir.columns:
        return reservoir.columns[name]
    return np.full(len(reservoir.priorities), np.nan)


@dataclass
class ColumnStats:
    """Exact and sketched statistics of one column on one side."""

    rows: int = 0
    nulls: int = 0
    numeric: int = 0
    text: int = 0  # non-null cells that are not numbers
    # ±inf cells: numbers, but outside every test of the values (KS, moments, quantiles); counted apart, like the
    # nulls, so a rise in their share is seen (attacker D6: 40% of a side turned +inf passed, missing 0.0%)
    infinite: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    categories: dict[str, int] = field(default_factory=dict)
    overflow: bool = False
    kll: bytes = b""
    bad_cells: list[str] = field(default_factory=list)  # first few item names of text cells in a numeric column

    def merge(self, other: "ColumnStats") -> "ColumnStats":
        categories = dict(self.categories)
        for key, count in other.categories.items():
            categories[key] = categories.get(key, 0) + count
        overflow = self.overflow or other.overflow or len(categories) > MAX_CATEGORIES
        return ColumnStats(
            rows=self.rows + other.rows, nulls=self.nulls + other.nulls, numeric=self.numeric + other.numeric,
            text=self.text + other.text, infinite=self.infinite + other.infinite, total=self.total + other.total,
            total_sq=self.total_sq + other.total_sq,
            low=min(self.low, other.low), high=max(self.high, other.high),
            categories={} if overflow else categories, overflow=overflow, kll=merge_kll(self.kll, other.kll),
            bad_cells=(self.bad_cells + other.bad_cells)[:10])

    @property
    def is_numeric(self) -> bool:
        numbers = self.numeric + self.infinite  # an infinity is a number (a column of them is numeric, not empty)
        filled = numbers + self.text
        return filled > 0 and numbers / filled >= MIXED_NUMERIC_SHARE

    @property
    def mean(self) -> float:
        return self.total / self.numeric if self.numeric else math.nan

    @property
    def std(self) -> float:
        if self.numeric < 2:
            return math.nan
        if self.low == self.high:  # constant: exactly 0, not the sums' rounding (5.8e-08 for a constant 0.625)
            return 0.0
        variance = (self.total_sq - self.total * self.total / self.numeric) / (self.numeric - 1)
        return math.sqrt(max(variance, 0.0))

    def null_rate(self) -> float:
        return self.nulls / self.rows if self.rows else math.nan


def kll_of(values: np.ndarray) -> bytes:
    import datasketches

    sketch = datasketches.kll_doubles_sketch(KLL_K)
    if len(values):
        array = np.ascontiguousarray(values, dtype=np.float64)
        sketch.update(array if array.flags.writeable else array.copy())  # Arrow-backed columns are read-only
    return bytes(sketch.serialize())


def merge_kll(a: bytes, b: bytes) -> bytes:
    if not a or not b:
        return a or b
    import datasketches

    left = datasketches.kll_doubles_sketch.deserialize(a)
    left.merge(datasketches.kll_doubles_sketch.deserialize(b))
    return bytes(left.serialize())


def kll_rank_error() -> float:
    import datasketches

    return float(datasketches.kll_doubles_sketch.get_normalized_rank_error(KLL_K, False))


def kll_ks_distance(a: bytes, b: bytes, points: int = 256) -> float | None:
    """KS distance between two KLL sketches (max CDF difference over both sketches' quantile grid); ± 2 × rank error."""
    if not a or not b:
        return None
    import datasketches

    left = datasketches.kll_doubles_sketch.deserialize(a)
    right = datasketches.kll_doubles_sketch.deserialize(b)
    if left.is_empty() or right.is_empty():
        return None
    ranks = np.linspace(0.0, 1.0, points)
    grid = np.unique(np.concatenate([left.get_quantiles(ranks), right.get_quantiles(ranks)]))
    return float(np.max(np.abs(np.asarray(left.get_cdf(grid))[:-1] - np.asarray(right.get_cdf(grid))[:-1])))


MAX_CATEGORY_CHARS = 200


def _short(text: str) -> str:
    return text if len(text) <= MAX_CATEGORY_CHARS else f"{text[:MAX_CATEGORY_CHARS]}…({len(text)} chars)"


def _numeric_fast(values: Any, sketch: np.ndarray | None) -> ColumnStats | None:
    """Statistics of a numeric column without NaN, inf or nulls in a few vectorized passes (a sum that comes out
    finite proves there are none), or None for the general path. Wide tables spend most of their time here."""
    array = values.to_numpy() if hasattr(values, "to_numpy") else np.asarray(values)
    if array.dtype.kind not in "biuf" or array.ndim != 1 or not len(array):
        return None
    total = float(array.sum(dtype=np.float64))
    if not math.isfinite(total):
        return None
    wide = array.astype(np.float64, copy=False) if array.dtype.kind in "biu" else array
    total_sq = float(np.einsum("i,i->", wide, wide, dtype=np.float64))
    if not math.isfinite(total_sq):
        return None
    return ColumnStats(rows=len(array), nulls=0, numeric=len(array), text=0, total=total, total_sq=total_sq,
                       low=float(array.min()), high=float(array.max()),
                       kll=kll_of(np.asarray(array if sketch is None else sketch, dtype=np.float64)))


def column_stats(values: Any, names: list[str], sketch: np.ndarray | None = None) -> ColumnStats:
    """Statistics of one pandas column (mixed text and numbers counted apart). ``sketch``: the values fed to the
    KLL sketch when not all of them (a seeded sample; see :data:`KLL_SHARD_VALUES`)."""
    import pandas as pd

    if getattr(values, "dtype", None) is not None and values.dtype.kind in "biuf":
        fast = _numeric_fast(values, sketch)
        if fast is not None:
            return fast
    series = pd.Series(values)
    null = series.isna().to_numpy()
    rows, nulls = len(series), int(null.sum())
    if series.dtype.kind in "biuf":
        numbers = series.to_numpy(dtype=np.float64)[~null]
        text_mask = np.zeros(0, bool)
        texts = pd.Series([], dtype=object)
    else:
        parsed = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
        is_num = ~np.isnan(parsed) & ~null
        numbers = parsed[is_num]
        text_mask = ~is_num & ~null
        texts = series[text_mask].astype(str)
    finite = numbers[np.isfinite(numbers)]
    counts = texts.value_counts(sort=False) if len(texts) else {}
    categories: dict[str, int] = {}
    for key, count in dict(counts).items():  # a hostile 1 MB cell must not become a 1 MB key in every report
        short = _short(str(key))
        categories[short] = categories.get(short, 0) + int(count)
    if series.dtype.kind not in "biuf" and len(finite) and len(texts):
        categories["<number>"] = len(finite)  # so a column that ends up categorical still counts every cell
    overflow = len(categories) > MAX_CATEGORIES
    bad = [names[i] for i in np.flatnonzero(text_mask)[:10]] if len(text_mask) else []
    with np.errstate(over="ignore"):  # values near 1e308 square to inf: the moments say so, no numpy warning does
        total, total_sq = float(finite.sum()), float(np.square(finite).sum())
    return ColumnStats(rows=rows, nulls=nulls, numeric=len(finite), text=int(text_mask.sum()) if len(text_mask) else 0,
                       infinite=len(numbers) - len(finite), total=total, total_sq=total_sq,
                       low=float(finite.min()) if len(finite) else math.inf,
                       high=float(finite.max()) if len(finite) else -math.inf,
                       categories={} if overflow else categories, overflow=overflow,
                       kll=kll_of(finite if sketch is None else sketch[np.isfinite(sketch)]),
                       bad_cells=bad)
