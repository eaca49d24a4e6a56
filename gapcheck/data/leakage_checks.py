"""The leakage checks proper: they run once, on the driver, over the merged split records (the near-duplicate
search may itself run as a job on the engine; see :func:`gapcheck.data.near.engine_search`)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gapcheck.data.leakage import AUC_GAP, NEAR_PERFECT_AUC, LeakageOptions, SplitRecords, single_feature_auc
from gapcheck.data.near import hamming_pairs, max_distance
from gapcheck.findings import Finding, Subject

MAX_FINDINGS_PER_CODE = 100  # beyond this a finding says how many more (the sections list up to MAX_PAIRS)
MAX_PAIRS = 10_000


@dataclass(frozen=True)
class Pair:
    """Two items of different splits that are the same (exact) or nearly the same (near)."""

    kind: str  # "file_bytes" | "pixels" | "row" | "row_without_identifiers" | "key" | "near"
    item: str
    other: str
    split: str
    other_split: str
    distance: int | None = None  # pHash Hamming distance (near pairs)
    dhash_distance: int | None = None
    label: Any = None
    other_label: Any = None


def _missing(label: Any) -> bool:
    return label is None or (isinstance(label, float) and math.isnan(label))


def exact_pairs(splits: dict[str, SplitRecords]) -> list[Pair]:
    """Items with the same content hash (strongest hash first: bytes, pixels, row, row without its identifier-like
    columns, key): across two different splits, and inside one split where that split is searched within
    (``SplitRecords.within``). A pair found by a stronger hash is not repeated by a weaker one.

    Each copy is paired with the first item holding its hash in another split (across) and with the first
    item of its own split (within), so n copies give n - 1 pairs, not n²."""
    pairs: list[Pair] = []
    found: set[tuple[str, str]] = set()
    names = list(splits)
    for kind, column in (("file_bytes", "file_sha"), ("pixels", "pixel_sha"), ("row", "row_hash"),
                         ("row_without_identifiers", "feature_hash"), ("key", "key_hash")):
        columns = [getattr(splits[split], column) for split in names]
        if all(isinstance(v, np.ndarray) and v.ndim == 2 for v in columns):
            groups = _repeated_rows(names, columns)
        else:
            owners: dict[Any, list[tuple[str, int]]] = {}
            for split, values in zip(names, columns, strict=True):
                if isinstance(values, np.ndarray):
                    values = values.tolist()
                for i, value in enumerate(values):
                    if value is not None:
                        owners.setdefault(value, []).append((split, i))
            groups = [items for items in owners.values() if len(items) > 1]
        for items in groups:
            pairs += _hash_pairs(kind, items, splits, found)
    return pairs


def _repeated_rows(names: list[str], arrays: list[np.ndarray]) -> list[list[tuple[str, int]]]:
    """The (split, row) holders of each 128-bit row hash held more than once, in the order a dict filled split by
    split would give (groups by their first holder, holders in split then row order), found with one stable sort
    instead of a Python tuple per row (a table's rows are mostly unique: building 600k tuples was the cost)."""
    sizes = [len(a) for a in arrays]
    if sum(sizes) < 2:
        return []
    both = np.concatenate([a.reshape(-1, 2) for a in arrays])
    order = np.lexsort((both[:, 1], both[:, 0]))  # stable: equal hashes keep split-then-row order
    ranked = both[order]
    same = np.all(ranked[1:] == ranked[:-1], axis=1)
    if not same.any():
        return []
    starts = np.flatnonzero(np.diff(np.concatenate([[False], same, [False]]).astype(np.int8)) == 1)
    ends = np.flatnonzero(np.diff(np.concatenate([[False], same, [False]]).astype(np.int8)) == -1)
    offsets = np.cumsum([0, *sizes])
    splits = np.searchsorted(offsets, order, side="right") - 1
    groups = [[(names[splits[k]], int(order[k] - offsets[splits[k]])) for k in range(a, b + 1)]
              for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    return sorted(groups, key=lambda g: (names.index(g[0][0]), g[0][1]))


def _hash_pairs(kind: str, items: list[tuple[str, int]], splits: dict[str, SplitRecords],
                found: set[tuple[str, str]]) -> list[Pair]:
    pairs: list[Pair] = []
    first_of: dict[str, int] = {}
    anchor = items[0]
    for split, i in items:
        others = [anchor] if split != anchor[0] else []
        if split in first_of and splits[split].within:
            others.append((split, first_of[split]))
        first_of.setdefault(split, i)
        for other_split, j in others:
            a, b = splits[other_split], splits[split]
            key = (b.names[i], a.names[j])
            if key not in found:
                found.add(key)
                pairs.append(Pair(kind, b.names[i], a.names[j], split, other_split, label=b.labels[i],
                                  other_label=a.labels[j]))
    return pairs


def near_pairs(splits: dict[str, SplitRecords], options: LeakageOptions, exact: Sequence[Pair],
               search: Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = hamming_pairs,
               ) -> list[Pair]:
    """pHash pairs within the threshold, each later split queried against each earlier one; exact pairs excluded.

    ``search`` is :func:`~gapcheck.data.near.hamming_pairs` or the engine-backed search of the same contract."""
    limit = max_distance(options.near)
    known = {(p.item, p.other) for p in exact}
    pairs: list[Pair] = []
    names = [s for s in splits if splits[s].kind == "images"]
    for j, query_split in enumerate(names):
        references = names[:j] + ([query_split] if splits[query_split].within else [])
        for reference_split in references:
            q, r = splits[query_split], splits[reference_split]
            q_keep, r_keep = np.flatnonzero(q.hashable), np.flatnonzero(r.hashable)
            qi, ri, dist = search(q.phash[q_keep], r.phash[r_keep], limit)
            qi, ri = q_keep[qi], r_keep[ri]
            if query_split == reference_split:  # each unordered pair once, never an image with itself
                keep = qi > ri
                qi, ri, dist = qi[keep], ri[keep], dist[keep]
            dh = np.bitwise_count(q.dhash[qi] ^ r.dhash[ri]) if len(qi) else np.zeros(0, np.int64)
            for a, b, d, e in zip(qi.tolist(), ri.tolist(), dist.tolist(), dh.tolist(), strict=True):
                if (q.names[a], r.names[b]) in known or (r.names[b], q.names[a]) in known:
                    continue
                pairs.append(Pair("near", q.names[a], r.names[b], query_split, reference_split, distance=d,
                                  dhash_distance=int(e), label=q.labels[a], other_label=r.labels[b]))
    return pairs


@dataclass(frozen=True)
class Files:
    """Where items are, as :func:`gapcheck.data.lines.shown_path` shows a file: ``tables`` maps split → table file
    display name → location; ``images`` maps an image's item name (``val:cat.jpg``) → its file."""

    tables: dict[str, dict[str, str]] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)


def item_subject(item: str, split: str, other: str, files: Files | None) -> Subject:
    """The subject of a finding about ``item``: a table row at its file and line (CSV) or row index (else), an
    image at its file (the other image's file as ``other``), so a SARIF result points at the file; a Dataset
    sample by its name. The item names (split-prefixed) stay in the finding's evidence."""
    from gapcheck.data.lines import item_location

    files = files or Files()
    if item in files.images:
        return Subject(path=files.images[item], other=files.images.get(other, other))
    located = item_location(item, files.tables.get(split, {}))
    if located is None:
        return Subject(path=item, other=other)
    path, line, row = located
    return Subject(path=path, line=line, sample=None if row is None else f"row {row}", other=other)


def _other_named(message: str, subject: Subject, other: str) -> str:
    """A line location is shown as ``file:line`` alone (Subject.describe): the other item goes into the message."""
    return f"{message} ({other})" if subject.line is not None else message


def pair_findings(exact: Sequence[Pair], near: Sequence[Pair], files: Files | None = None,
                  set_aside: Sequence[str] = ()) -> list[Finding]:
    """The duplicate pairs as findings; ``set_aside``: the identifier-like columns a ``row_without_identifiers``
    match left out (named in its message and evidence)."""
    from gapcheck.codes import data as codes

    but = f"identical row apart from {', '.join(list(set_aside)[:5])} (identifier-like, set aside)"

    findings: list[Finding] = []
    across_exact, within_exact = _by_scope(exact)
    across_near, within_near = _by_scope(near)
    for code, pairs in ((codes.EXACT_DUPLICATE, across_exact), (codes.NEAR_DUPLICATE, across_near),
                        (codes.DUPLICATE_WITHIN, within_exact), (codes.NEAR_DUPLICATE_WITHIN, within_near)):
        for pair in pairs[:MAX_FINDINGS_PER_CODE]:
            how = (f"pHash distance {pair.distance}/64 (dHash {pair.dhash_distance})" if pair.kind == "near"
                   else {"file_bytes": "identical file bytes", "pixels": "identical decoded pixels",
                         "row": "identical row", "row_without_identifiers": but,
                         "key": "identical key columns"}[pair.kind])
            where = (f"within {pair.split}" if pair.split == pair.other_split
                     else f"across {pair.split} and {pair.other_split}")
            subject = item_subject(pair.item, pair.split, pair.other, files)
            findings.append(code.finding(
                _other_named(f"{how} {where}", subject, pair.other), subject=subject,
                evidence={"match": pair.kind, "hamming": pair.distance, "dhash_hamming": pair.dhash_distance,
                          "splits": [pair.split, pair.other_split], "items": [pair.item, pair.other],
                          **({"set_aside": list(set_aside)} if pair.kind == "row_without_identifiers" else {})}))
        if len(pairs) > MAX_FINDINGS_PER_CODE:
            findings.append(code.finding(f"{len(pairs) - MAX_FINDINGS_PER_CODE} more pair(s) like these (see the "
                                         f"report's pairs)", subject=Subject(group="more"),
                                         evidence={"total": len(pairs)}))
    return findings


#: A split whose rows repeat inside it this often (share of its rows not the first of their kind) is a table of
#: natural repeats: its identical rows across splits get a warning beside them.
REPEATING_ROWS = 0.05


def repeat_findings(splits: dict[str, SplitRecords], exact: Sequence[Pair]) -> list[Finding]:
    """A warning beside table rows found identical across splits when the splits' rows also repeat inside them (a
    few categorical columns: the reviewer's all-categorical table gave 190 'copies' that were natural repeats).
    The duplicates stay gaps; the warning says how often each split repeats itself."""
    from gapcheck.codes import data as codes

    across = [p for p in exact if p.split != p.other_split and p.kind in ("row", "row_without_identifiers")]
    if not across:
        return []
    shares = {}
    for name, records in splits.items():
        # over the rows without their identifier-like columns where they were hashed so (an id makes every row
        # unique, whatever its features repeat), else over the whole rows
        hashes = records.feature_hash
        if not (isinstance(hashes, np.ndarray) and hashes.ndim == 2 and len(hashes)):
            hashes = records.row_hash
        if isinstance(hashes, np.ndarray) and hashes.ndim == 2 and len(hashes):
            shares[name] = 1.0 - len(np.unique(hashes, axis=0)) / len(hashes)
    repeating = {name: share for name, share in shares.items() if share >= REPEATING_ROWS}
    if not repeating:
        return []
    said = ", ".join(f"{name} {share:.0%}" for name, share in repeating.items())
    return [codes.ROWS_REPEAT.finding(
        f"rows repeat inside the splits ({said} of their rows are repeats of another row of the same split): some "
        f"of the {len(across)} row(s) identical across splits may be natural repeats, not copies (--key with a "
        "sample identifier tells them apart)", subject=Subject(group="rows"),
        evidence={"repeat_share": shares, "threshold": REPEATING_ROWS, "identical_across": len(across)})]


def _by_scope(pairs: Sequence[Pair]) -> tuple[list[Pair], list[Pair]]:
    """(pairs across two splits, pairs inside one split)."""
    return [p for p in pairs if p.split != p.other_split], [p for p in pairs if p.split == p.other_split]


def within_pairs(pairs: Sequence[Pair]) -> list[Pair]:
    return _by_scope(pairs)[1]


def across_pairs(pairs: Sequence[Pair]) -> list[Pair]:
    return _by_scope(pairs)[0]


def label_findings(splits: dict[str, SplitRecords], pairs: Sequence[Pair], files: Files | None = None) -> list[Finding]:
    """Duplicates whose labels differ (across and within splits), and missing labels per split."""
    from gapcheck.codes import data as codes

    findings: list[Finding] = []
    conflicts = [p for p in pairs if not _missing(p.label) and not _missing(p.other_label) and p.label != p.other_label]
    seen = {frozenset((p.item, p.other)) for p in conflicts}
    for split, records in splits.items():  # exact duplicates inside one split with two labels
        by_hash: dict[Any, list[int]] = {}
        hashes: list[Any] = list(records.pixel_sha) or [tuple(v) for v in records.row_hash.tolist()]
        for i, value in enumerate(hashes):
            by_hash.setdefault(value, []).append(i)
        for items in by_hash.values():
            labels = {str(records.labels[i]) for i in items if not _missing(records.labels[i])}
            if len(labels) > 1:
                first = items[0]
                for i in items[1:]:
                    if frozenset((records.names[i], records.names[first])) in seen:
                        continue  # already a within-split pair
                    if str(records.labels[i]) != str(records.labels[first]) and not _missing(records.labels[i]):
                        conflicts.append(Pair("within", records.names[i], records.names[first], split, split,
                                              label=records.labels[i], other_label=records.labels[first]))
    for pair in conflicts[:MAX_FINDINGS_PER_CODE]:
        findings.append(codes.LABEL_CONFLICT.finding(
            f"{pair.item} is labelled {pair.label!r} but its duplicate {pair.other} is {pair.other_label!r}",
            subject=item_subject(pair.item, pair.split, pair.other, files),
            evidence={"label": pair.label, "other_label": pair.other_label, "match": pair.kind,
                      "splits": [pair.split, pair.other_split], "items": [pair.item, pair.other]}))
    labelled = any(not _missing(label) for r in splits.values() for label in r.labels)
    for split, records in splits.items():
        missing = [n for n, label in zip(records.names, records.labels, strict=True) if _missing(label)]
        if labelled and missing:
            findings.append(codes.LABEL_MISSING.finding(
                f"{len(missing)} of {len(records.names)} item(s) in {split} have no label", subject=Subject(stage=split),
                evidence={"count": len(missing), "items": missing[:20]}))
    return findings


def group_findings(splits: dict[str, SplitRecords]) -> list[Finding]:
    from gapcheck.codes import data as codes

    findings: list[Finding] = []
    counts = {s: _group_counts(r.groups) for s, r in splits.items()}
    names = list(splits)
    for j, split in enumerate(names):
        for other in names[:j]:
            shared = sorted(set(counts[split]) & set(counts[other]), key=str)
            if shared:
                findings.append(codes.GROUP_OVERLAP.finding(
                    f"{len(shared)} group(s) in both {other} and {split}: {', '.join(map(str, shared[:10]))}",
                    subject=Subject(stage=f"{other}↔{split}"),
                    evidence={"groups": [str(g) for g in shared[:50]], "shared": len(shared),
                              "items": {str(g): [counts[other][g], counts[split][g]] for g in shared[:50]}}))
    return findings


def _group_counts(groups: list[Any]) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for group in groups:
        if not _missing(group):
            counts[group] = counts.get(group, 0) + 1
    return counts


def target_leakage(splits: dict[str, SplitRecords]) -> tuple[list[Finding], dict[str, dict[str, float | None]]]:
    """Target leakage per feature: a per-group label mean reproduced by construction (see
    :mod:`gapcheck.data.encodings`), else a single-feature AUC near-perfect or much higher in one split."""
    from gapcheck.data.encodings import encoding_matches

    table: dict[str, dict[str, float | None]] = {}
    counts: dict[str, tuple[int, int] | None] = {}
    for split, records in splits.items():
        columns = records.sample.columns
        if "__label__" not in columns:
            continue
        counts[split] = _class_counts(columns["__label__"])
        for feature in sorted(c for c in columns if c not in ("__label__", "__group__")):
            table.setdefault(feature, {})[split] = single_feature_auc(columns[feature], columns["__label__"])
    matches: dict[str, list[Any]] = {}
    for match in encoding_matches(splits):
        matches.setdefault(match.feature, []).append(match)
    findings = [_encoding_finding(feature, found, table.get(feature, {})) for feature, found in matches.items()]
    for feature, per_split in table.items():
        if feature not in matches:
            findings += _auc_findings(feature, per_split, counts, len(table))
    return findings, table


def _encoding_finding(feature: str, matches: list[Any], auc: dict[str, float | None]) -> Finding:
    from gapcheck.codes import data as codes
    from gapcheck.data.encodings import DESCRIPTIONS

    kinds = sorted({m.construction for m in matches}, key=lambda c: [m.construction for m in matches].index(c))
    where = "; ".join(f"{m.split}: {m.shares[m.construction]:.0%} of {m.rows} sampled rows" for m in matches)
    what = " / ".join(DESCRIPTIONS[k] for k in kinds)
    return codes.TARGET_LEAKAGE.finding(
        f"{feature} is a target encoding built with labels it must not see: it equals {what} ({where})",
        subject=Subject(output=feature),
        evidence={"construction": {m.split: m.construction for m in matches},
                  "match_share": {m.split: {k: round(v, 6) for k, v in m.shares.items()} for m in matches},
                  "rows_compared": {m.split: m.rows for m in matches},
                  "examples": {m.split: list(m.examples) for m in matches},
                  "auc": {s: round(v, 6) for s, v in auc.items() if v is not None}})


MIN_CLASS_FOR_NEAR_PERFECT = 50  # fewer of a class: an honest strong feature separates a split perfectly by chance
AUC_GAP_ALPHA = 0.01  # the AUC difference must also be significant at this level, Bonferroni over the features


def _class_counts(label: np.ndarray) -> tuple[int, int] | None:
    """(rows of the larger class label, of the smaller) of a binary label, as single_feature_auc counts them."""
    y = label[np.isfinite(label)]
    classes = np.unique(y)
    if len(classes) != 2:
        return None
    positive = int((y == classes[1]).sum())
    return positive, len(y) - positive


def _auc_var_bound(auc: float, n_pos: int, n_neg: int) -> float:
    """A distribution-free upper bound of an AUC estimate's variance, A(1 − A) / min(n_pos, n_neg) (Birnbaum &
    Klose 1957). Hanley & McNeil's formula assumes exponential scores and, on real features, still let 2 of 20
    random 20-row splits of breast_cancer through as target_leakage."""
    return auc * (1 - auc) / max(min(n_pos, n_neg), 1)


def _auc_gap_significant(a: float, b: float, counts_a: tuple[int, int], counts_b: tuple[int, int],
                         tests: int) -> bool:
    """Whether AUCs a and b differ beyond sampling noise: z under the null of one AUC for both splits (their
    pair-weighted mean), Bonferroni over ``tests`` features. A 20-row split of breast_cancer gave honest features
    AUC 0.93 in train but 0.68 in val by chance, every seed a target_leakage (new-user review)."""
    from scipy import stats

    pairs_a, pairs_b = counts_a[0] * counts_a[1], counts_b[0] * counts_b[1]
    pooled = (a * pairs_a + b * pairs_b) / (pairs_a + pairs_b)
    se = math.sqrt(_auc_var_bound(pooled, *counts_a) + _auc_var_bound(pooled, *counts_b))
    return se == 0 or abs(a - b) / se >= float(stats.norm.isf(AUC_GAP_ALPHA / (2 * max(tests, 1))))


def _auc_findings(feature: str, per_split: dict[str, float | None], counts: dict[str, tuple[int, int] | None],
                  tests: int) -> list[Finding]:
    from gapcheck.codes import data as codes

    values = {s: v for s, v in per_split.items() if v is not None and counts.get(s)}
    if not values:
        return []
    best = max(values, key=lambda s: values[s])
    worst = min(values, key=lambda s: values[s])
    perfect = [s for s in sorted(values, key=lambda s: -values[s])
               if values[s] >= NEAR_PERFECT_AUC and min(counts[s] or (0, 0)) >= MIN_CLASS_FOR_NEAR_PERFECT]
    gap = values[best] - values[worst] >= AUC_GAP and _auc_gap_significant(
        values[best], values[worst], counts[best] or (0, 0), counts[worst] or (0, 0), tests)
    if not perfect and not gap:
        return []
    why = (f"near-perfect AUC {values[perfect[0]]:.3f} in {perfect[0]}" if perfect
           else f"AUC {values[best]:.3f} in {best} but {values[worst]:.3f} in {worst}")
    return [codes.TARGET_LEAKAGE.finding(f"{feature} predicts the label alone: {why}", subject=Subject(output=feature),
                                         evidence={"auc": {s: round(v, 6) for s, v in values.items()},
                                                   "rows_per_class": {s: list(counts[s] or ()) for s in values}})]
