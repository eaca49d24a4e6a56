"""Target encodings found by construction: does a numeric feature reproduce a per-group label mean?

A target encoding computed with labels it should not see is invisible to single-feature AUC when
it leaks the same way into every split (the seed's CTR story: a per-user mean of the click label
over train + validation has AUC 0.959 in train and 0.958 in validation). It is visible by
construction: the feature *is* (almost) the group's label mean including rows it must not include.
For every numeric feature the sampled rows' values are compared with four means recomputed
exactly from every row's (group, label):

- ``in_split``: the group's label mean within the row's split, the row's own label included;
- ``loo_in_split``: the same without the row (leave-one-out; the group sum still gives the label away);
- ``across_splits``: the group's mean over all splits (the other splits' labels, own label included);
- ``loo_across_splits``: over all splits without the row.

A feature reproduces one when at least :data:`MATCH_SHARE` of its compared rows equal it within a
float32 rounding (``1e-6 × (1 + |mean|)``) and the mean takes at least :data:`MIN_DISTINCT` values
(so a label copy, a constant or a binary flag is left to the AUC rules). An out-of-fold encoding
(each row's mean from other folds of the training split; validation rows from the training split)
reproduces none of them. Smoothed encodings (``(sum + a·prior) / (n + a)``) are not matched exactly;
the AUC rules still apply to them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

CONSTRUCTIONS = ("in_split", "loo_in_split", "across_splits", "loo_across_splits")
MATCH_SHARE = 0.9
MIN_ROWS = 20
MIN_DISTINCT = 3
RELATIVE_TOLERANCE = 1e-6  # float32 storage of a float64 mean differs by ~6e-8 relative
MAX_EXAMPLES = 3

DESCRIPTIONS = {
    "in_split": "the group's label mean within its own split, each row's own label included",
    "loo_in_split": "the group's leave-one-out label mean within its split (the group sum gives the row's label away)",
    "across_splits": "the group's label mean over all splits (the other splits' labels, each row's own included)",
    "loo_across_splits": "the group's leave-one-out label mean over all splits (the other splits' labels)",
}


@dataclass(frozen=True)
class EncodingMatch:
    """A feature that reproduces a per-group label mean in one split, with the evidence."""

    feature: str
    split: str
    construction: str
    rows: int  # sampled rows compared
    shares: dict[str, float]  # construction -> share of rows equal to it
    examples: tuple[dict[str, Any], ...]


def _label_numbers(labels: list[Any]) -> np.ndarray:
    import pandas as pd

    return pd.to_numeric(pd.Series(labels, dtype=object), errors="coerce").to_numpy(np.float64)


def _group_sums(groups: list[Any], labels: np.ndarray) -> Any:
    """``DataFrame(index=group, columns=[count, sum])`` over rows with a group and a numeric label."""
    import pandas as pd

    frame = pd.DataFrame({"group": pd.Series(groups, dtype=object), "label": labels})
    frame = frame[frame["group"].notna() & np.isfinite(frame["label"])]
    return frame.groupby("group", sort=False)["label"].agg(["count", "sum"])


def _lookup(stats: Any, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    position = stats.index.get_indexer(groups)
    found = position >= 0
    count = np.where(found, stats["count"].to_numpy(np.float64)[position], np.nan)
    total = np.where(found, stats["sum"].to_numpy(np.float64)[position], np.nan)
    return count, total


def candidate_means(groups: np.ndarray, labels: np.ndarray, in_split: Any, everywhere: Any) -> dict[str, np.ndarray]:
    """The four group label means for the given rows (NaN where undefined: no group, one row only)."""
    count_s, sum_s = _lookup(in_split, groups)
    count_a, sum_a = _lookup(everywhere, groups)
    own = np.where(np.isfinite(labels), labels, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "in_split": sum_s / count_s,
            "loo_in_split": np.where(count_s >= 2, (sum_s - own) / (count_s - 1), np.nan),
            "across_splits": sum_a / count_a,
            "loo_across_splits": np.where(count_a >= 2, (sum_a - own) / (count_a - 1), np.nan),
        }


def _shares(feature: np.ndarray, candidates: dict[str, np.ndarray]) -> tuple[dict[str, float], dict[str, int]]:
    shares: dict[str, float] = {}
    rows: dict[str, int] = {}
    for name, mean in candidates.items():
        usable = np.isfinite(feature) & np.isfinite(mean)
        n = int(usable.sum())
        rows[name] = n
        if n < MIN_ROWS or len(np.unique(mean[usable])) < MIN_DISTINCT:
            continue
        close = np.abs(feature[usable] - mean[usable]) <= RELATIVE_TOLERANCE * (1.0 + np.abs(mean[usable]))
        shares[name] = float(close.mean())
    return shares, rows


def encoding_matches(splits: dict[str, Any]) -> list[EncodingMatch]:
    """Every (feature, split) whose values reproduce a group label mean (splits: name → SplitRecords)."""
    import pandas as pd

    usable = {s: r for s, r in splits.items() if r.kind == "table" and {"__label__", "__group__"} <= set(r.sample.columns)}
    if not usable:
        return []
    labels = {s: _label_numbers(r.labels) for s, r in usable.items()}
    per_split = {s: _group_sums(r.groups, labels[s]) for s, r in usable.items()}
    combined = pd.concat(list(per_split.values()))
    everywhere = combined.groupby(level=0, sort=False).sum()
    matches: list[EncodingMatch] = []
    for split, records in usable.items():
        columns = records.sample.columns
        groups = np.asarray(columns["__group__"], dtype=object)
        candidates = candidate_means(groups, np.asarray(columns["__label__"], np.float64), per_split[split], everywhere)
        for feature in sorted(c for c in columns if c not in ("__label__", "__group__")):
            values = np.asarray(columns[feature], np.float64)
            shares, rows = _shares(values, candidates)
            if not shares:
                continue
            best = max(CONSTRUCTIONS, key=lambda c: (shares.get(c, -1.0), -CONSTRUCTIONS.index(c)))
            if shares.get(best, 0.0) < MATCH_SHARE:
                continue
            matches.append(EncodingMatch(feature, split, best, rows[best], shares,
                                         _examples(values, groups, candidates[best])))
    return matches


def _examples(values: np.ndarray, groups: np.ndarray, mean: np.ndarray) -> tuple[dict[str, Any], ...]:
    picked = np.flatnonzero(np.isfinite(values) & np.isfinite(mean))[:MAX_EXAMPLES]
    return tuple({"group": _plain(groups[i]), "feature": float(values[i]), "group_label_mean": float(mean[i])}
                 for i in picked)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)[:200]
