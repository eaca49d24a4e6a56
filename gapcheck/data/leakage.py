"""`gapcheck leakage`: the same sample, a near copy, the same group, or the label hiding in a feature, across splits.

A job on the engines. Each shard becomes ``{split: SplitRecords}``: per item its name, label,
group and hashes (file-bytes SHA256, decoded-pixel SHA256, pHash, dHash for images; 128-bit
canonical row and key hashes for tables) plus, for tables with a label, a seeded row sample.
Merging concatenates in shard order (exact). The checks run once on the merged records:
exact duplicates by hash join, near duplicates by :mod:`gapcheck.data.near` (query split ×
reference split), group overlap, label conflicts and missing labels, and target leakage
(single-feature AUC near-perfect, or much higher in one split than another).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gapcheck.data.common import empty_keyed, merge_keyed
from gapcheck.data.hashing import (
    decode_path,
    file_sha256,
    perceptual_hashes,
    pixel_sha256,
    rgb_pixels,
    row_hashes,
    upright,
)
from gapcheck.data.readers import iter_frames, iter_images
from gapcheck.data.sketches import SAMPLE_SIZE, Reservoir

if TYPE_CHECKING:
    from gapcheck.groups.data import LeakageSpec

NEAR_PERFECT_AUC = 0.99
AUC_GAP = 0.15  # one split's AUC this much above another's: an encoding fit with that split's labels


# pHash works on a 32x32 resample: a smaller image is mostly interpolation, and different tiny images (8x8 digits)
# land within a few bits of each other. Such images are compared for exact duplicates only.
MIN_HASH_SIDE = 32

@dataclass(frozen=True)
class LeakageOptions:
    near: float = 0.9  # perceptual similarity: 0.9 → up to 6 of 64 pHash bits may differ
    key_columns: tuple[str, ...] | None = None
    group_column: str | None = None
    label_column: str | None = None
    seed: int = 0
    sample_size: int = SAMPLE_SIZE
    # Duplicates within a split: None checks validation/test splits (by name, see WITHIN_NAMES), True every
    # split, False none, a tuple of names exactly those splits.
    within: bool | tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        from gapcheck.data.drift import check_fraction

        check_fraction("near", self.near)
        if self.sample_size < 2:
            from gapcheck.errors import UsageError
            raise UsageError(f"the sample size must be at least 2, got {self.sample_size}", parameter="sample_size")
        within = self.within
        if isinstance(within, str):  # one split name (a config file's `within = "val"`), never a substring test
            within = (within,)
        if isinstance(within, list):  # from a config file or JSON
            within = tuple(within)
        if not (within is None or isinstance(within, bool) or
                (isinstance(within, tuple) and all(isinstance(n, str) and n for n in within))):
            from gapcheck.errors import UsageError
            raise UsageError(f"within must be true, false or split names, got {self.within!r}", parameter="within")
        object.__setattr__(self, "within", within)

    @classmethod
    def from_spec(cls, spec: LeakageSpec) -> LeakageOptions:
        """The options a resolved :class:`~gapcheck.groups.data.LeakageSpec` describes (a field it leaves None takes
        the default here, the only one)."""
        given: dict[str, Any] = {"near": spec.near, "key_columns": spec.key or None, "group_column": spec.group_column,
                                 "label_column": spec.label_column, "within": spec.within_split or spec.within}
        return cls(**{k: v for k, v in given.items() if v is not None})


# Split names checked for duplicates within by default: a name with one of these words (val, test_2024, leaky-val).
WITHIN_NAMES = frozenset({"val", "valid", "validation", "dev", "test", "testing", "eval", "evaluation", "holdout",
                          "heldout"})


def checks_within(within: bool | tuple[str, ...] | list[str] | None, split: str) -> bool:
    """Whether ``split`` is searched for duplicates inside itself under the ``within`` option."""
    import re

    if within is None:
        return bool(WITHIN_NAMES & set(re.split(r"[^a-z0-9]+", split.lower())))
    if isinstance(within, bool):
        return within
    return split in within


@dataclass
class SplitRecords:
    """One split's items and hashes. Hash arrays are kept as chunks (one per shard) and joined once, on first
    read: merging appends in place, so merging n shards costs O(items), not O(items × shards)."""

    kind: str = ""
    names: list[str] = field(default_factory=list)
    urls: list[str | None] = field(default_factory=list)
    labels: list[Any] = field(default_factory=list)
    groups: list[Any] = field(default_factory=list)
    file_sha: list[str | None] = field(default_factory=list)
    pixel_sha: list[str] = field(default_factory=list)
    chunks: dict[str, list[np.ndarray]] = field(default_factory=dict)  # phash, dhash, row/feature/key_hash
    sample: Reservoir = field(default_factory=Reservoir)
    bad: list[tuple[str, str]] = field(default_factory=list)
    decode_paths: set[str] = field(default_factory=set)  # what the workers decoded with (must be one)
    within: bool = False  # searched for duplicates inside itself (LeakageOptions.within, decided per split)

    def merge(self, other: "SplitRecords") -> "SplitRecords":
        """Append ``other`` to this accumulator (in place; run_job passes a fresh one) and return it."""
        self.kind = self.kind or other.kind
        self.within = self.within or other.within
        self.decode_paths |= other.decode_paths
        for name in ("names", "urls", "labels", "groups", "file_sha", "pixel_sha", "bad"):
            getattr(self, name).extend(getattr(other, name))
        for name, parts in other.chunks.items():
            self.chunks.setdefault(name, []).extend(parts)
        self.sample = self.sample.merge(other.sample)
        return self

    def array(self, name: str) -> np.ndarray:
        """The joined hash array ``name`` (``phash``/``dhash``: uint64; ``row_hash``/``key_hash``: n × 2 uint64)."""
        parts = self.chunks.get(name, [])
        if len(parts) != 1:
            empty = np.zeros((0, 2) if name.endswith("_hash") else 0, np.uint64)
            self.chunks[name] = [np.concatenate(parts) if parts else empty]
        return self.chunks[name][0]

    @property
    def phash(self) -> np.ndarray:
        return self.array("phash")

    @property
    def dhash(self) -> np.ndarray:
        return self.array("dhash")

    @property
    def hashable(self) -> np.ndarray:
        """Per image: large enough for its perceptual hashes to mean something (see :data:`MIN_HASH_SIDE`)."""
        flags = self.array("hashable")
        return flags.astype(bool) if len(flags) == len(self.names) else np.ones(len(self.names), dtype=bool)

    @property
    def row_hash(self) -> np.ndarray:
        return self.array("row_hash")

    @property
    def key_hash(self) -> np.ndarray:
        return self.array("key_hash")

    @property
    def feature_hash(self) -> np.ndarray:
        """Row hashes over the compared columns without the identifier-like ones (empty when none was set aside)."""
        return self.array("feature_hash")


def leakage_task(payload: dict[str, Any]) -> dict[str, SplitRecords]:
    """One shard → ``{split: SplitRecords}`` (module level: every engine can ship it)."""
    source = payload["source"]
    if source["kind"] == "images" or source.get("sample_kind") == "images":
        records = _image_records(source, payload.get("groups"), payload.get("labels"))
    else:
        records = _table_records(source, payload["options"])
    records.within = checks_within(payload["options"].get("within"), source["split"])
    return {source["split"]: records}


def _image_records(source: dict[str, Any], groups: list[Any] | None, labels: list[Any] | None) -> SplitRecords:
    out = SplitRecords(kind="images", decode_paths={decode_path()})
    urls = source.get("urls") or [None] * (source.get("stop", 0) - source.get("start", 0))
    phash, dhash, hashable = [], [], []
    for position, (item, url) in enumerate(zip(iter_images(source), urls, strict=True)):
        if item.error:
            out.bad.append((item.name, item.error))
            continue
        rgb = item.image.convert("RGB")
        shown = upright(item.image, rgb)  # as displayed: an EXIF-rotated copy hashes like its original
        p, d = perceptual_hashes(shown)
        out.names.append(item.name)
        out.urls.append(url)
        out.labels.append(labels[position] if labels is not None else item.label)
        out.groups.append(groups[position] if groups is not None else None)
        out.file_sha.append(file_sha256(item.data) if item.data is not None else None)
        out.pixel_sha.append(pixel_sha256(rgb_pixels(rgb)))
        phash.append(p)
        dhash.append(d)
        hashable.append(min(shown.size) >= MIN_HASH_SIDE)
    out.chunks = {"phash": [np.asarray(phash, dtype=np.uint64)], "dhash": [np.asarray(dhash, dtype=np.uint64)],
                  "hashable": [np.asarray(hashable, dtype=np.uint64)]}
    return out


def _table_records(source: dict[str, Any], options: dict[str, Any]) -> SplitRecords:
    merged = SplitRecords(kind="table", sample=Reservoir(k=options["sample_size"]))
    for shard in iter_frames(source):  # CSV files come in chunks: memory per worker stays bounded
        merged = merged.merge(_frame_records(shard, source, options))
    return merged


def _frame_records(shard: Any, source: dict[str, Any], options: dict[str, Any]) -> SplitRecords:
    frame = shard.data.rename(columns=str)
    label, group, keys = options["label_column"], options["group_column"], options["key_columns"]
    if not shard.names and len(frame.columns) == 0:  # nothing read (an empty or unreadable file): only its problems
        return SplitRecords(kind="table", bad=list(shard.bad))
    for column in [c for c in (label, group, *(keys or ())) if c]:
        if column not in frame.columns:
            from gapcheck.errors import UsageError
            raise UsageError(f"{source['name']}: no column {column!r} (columns: {', '.join(map(str, frame.columns))})")
    out = SplitRecords(kind="table", names=list(shard.names), urls=[None] * len(shard.names), bad=list(shard.bad))
    out.labels = frame[label].tolist() if label else [None] * len(frame)
    out.groups = frame[group].tolist() if group else [None] * len(frame)
    features = frame.drop(columns=[c for c in (label, group) if c])
    compared = options.get("compare_columns")  # the columns every split holds (gapcheck.data.columns)
    out.chunks = {"row_hash": [row_hashes(features if compared is None else
                                          features[[c for c in compared if c in features.columns]])]}
    without_ids = options.get("feature_columns")  # the compared columns but identifier-like ones (a renumbered copy)
    if without_ids:
        out.chunks["feature_hash"] = [row_hashes(features[[c for c in without_ids if c in features.columns]])]
    if keys:
        out.chunks["key_hash"] = [row_hashes(frame[list(keys)])]
    if label:
        numeric = {c: features[c].to_numpy(np.float64) for c in features.columns if features[c].dtype.kind in "biuf"}
        numeric["__label__"] = _label_codes(frame[label])
        if group:  # the sampled rows' groups: target encodings are recomputed for them (leakage_checks.encodings)
            numeric["__group__"] = frame[group].to_numpy(object)
        out.sample = Reservoir.of(out.names, numeric, options["seed"], options["sample_size"])
    return out


def _label_codes(labels: Any) -> np.ndarray:
    import pandas as pd

    numbers = pd.to_numeric(labels, errors="coerce").to_numpy(np.float64)
    return numbers


empty_partial = empty_keyed  # the engines' empty and merge of {key: partial} (gapcheck.data.common)
merge_partials = merge_keyed


def single_feature_auc(feature: np.ndarray, label: np.ndarray) -> float | None:
    """max(AUC, 1 − AUC) of one feature for a binary label (None when not binary or too few rows)."""
    from scipy.stats import rankdata

    keep = np.isfinite(feature) & np.isfinite(label)
    x, y = feature[keep], label[keep]
    classes = np.unique(y)
    if len(classes) != 2 or len(x) < 20:
        return None
    positive = y == classes[1]
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    ranks = rankdata(x)
    auc = (ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return float(max(auc, 1.0 - auc))
