"""Per-shard feature extraction shared by drift (and leakage's target check): a table shard's columns
as :class:`ColumnStats` plus a :class:`Reservoir` of rows, or an image shard turned into image-property rows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gapcheck.data.readers import iter_frames, iter_images
from gapcheck.data.sketches import KLL_SHARD_VALUES, ColumnStats, Reservoir, column_stats, name_priorities

IMAGE_FEATURES = ("mean_r", "mean_g", "mean_b", "std_r", "std_g", "std_b", "brightness", "width", "height",
                  "aspect_ratio")


@dataclass
class SidePartial:
    """Everything one side (a split, the reference, the current set) contributes from some shards."""

    columns: dict[str, ColumnStats] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # column order as first seen
    reservoir: Reservoir = field(default_factory=Reservoir)
    rows: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)
    # images: how many carry each EXIF orientation tag that turns them (2-8); they are measured as displayed
    orientations: dict[int, int] = field(default_factory=dict)

    def merge(self, other: "SidePartial") -> "SidePartial":
        columns = dict(self.columns)
        for name, stats in other.columns.items():
            columns[name] = columns[name].merge(stats) if name in columns else stats
        order = self.order + [n for n in other.order if n not in self.order]
        orientations = dict(self.orientations)
        for tag, count in other.orientations.items():
            orientations[tag] = orientations.get(tag, 0) + count
        return SidePartial(columns=columns, order=order, reservoir=self.reservoir.merge(other.reservoir),
                           rows=self.rows + other.rows, bad=self.bad + other.bad,
                           orientations=dict(sorted(orientations.items())))


def image_rows(payload: dict[str, Any]) -> tuple[Any, list[str], list[tuple[str, str]], dict[int, int]]:
    """An image shard as a DataFrame of image properties (per-channel mean/std, brightness, size, aspect), measured
    as displayed: EXIF orientation applied, as for the perceptual hashes (a phone photo stored sideways with tag 6
    is shown upright; its stored width and height would read as a size drift). Also the count of each turning
    orientation tag met."""
    import pandas as pd

    from gapcheck.data.hashing import orientation, upright

    rows, names, bad = [], [], []
    orientations: dict[int, int] = {}
    for item in iter_images(payload):
        if item.error:
            bad.append((item.name, item.error))
            continue
        tag = orientation(item.image)
        shown = upright(item.image, item.image) if tag != 1 else item.image
        if tag != 1:
            orientations[tag] = orientations.get(tag, 0) + 1
        pixels = np.asarray(shown.convert("RGB"), dtype=np.float32)
        gray = np.asarray(shown.convert("L"), dtype=np.float32)
        means = pixels.reshape(-1, 3).mean(axis=0)
        stds = pixels.reshape(-1, 3).std(axis=0)
        height, width = gray.shape
        rows.append((*means.tolist(), *stds.tolist(), float(gray.mean()), width, height, width / height))
        names.append(item.name)
    return pd.DataFrame(rows, columns=list(IMAGE_FEATURES)), names, bad, orientations


def side_partial(payload: dict[str, Any], columns: list[str] | None, seed: int, k: int,
                 exclude: tuple[str, ...] = ()) -> SidePartial:
    """Statistics and a row sample of one shard of one side (runs on a worker)."""
    if payload["kind"] == "images" or payload.get("sample_kind") == "images":
        frame, names, bad, orientations = image_rows(payload)
        partial = _frame_partial(frame, names, bad, columns, seed, k, exclude)
        partial.orientations = orientations
        return partial
    if payload["kind"] == "table" and payload.get("format") in ("parquet", "pq") and not exclude:
        return _parquet_partial(payload, columns, seed, k)
    merged = SidePartial(reservoir=Reservoir(k=k))
    for shard in iter_frames(payload):  # CSV files come in chunks: memory per worker stays bounded
        merged = merged.merge(_frame_partial(shard.data, shard.names, list(shard.bad), columns, seed, k, exclude))
    return merged


BLOCK_CELLS = 4_000_000  # a parquet row group is read this many cells (~32 MB of float64) at a time


def _parquet_partial(payload: dict[str, Any], columns: list[str] | None, seed: int, k: int) -> SidePartial:
    """One parquet row group, read in blocks of columns (memory per worker bounded by :data:`BLOCK_CELLS`, not by
    the table's width); the rows' sample is chosen once (seeded name priorities) and taken from every block."""
    from gapcheck.data.readers import parquet_file, row_names

    with parquet_file(payload["url"]) as handle:
        meta = handle.metadata.row_group(payload["row_group"])
        rows = meta.num_rows
        schema = handle.schema_arrow
        index = {i for i in (schema.pandas_metadata or {}).get("index_columns", []) if isinstance(i, str)}
        available = [str(n) for n in schema.names if n not in index]  # pandas' stored index is not a feature
        if columns:
            missing = [c for c in columns if c not in available]
            if missing:
                from gapcheck.errors import UsageError
                raise UsageError(f"{payload['name']}: no column(s) {', '.join(missing)}")
        wanted = list(columns) if columns else available
        names = row_names(payload, rows)
        priorities = name_priorities(names, seed) if names else np.zeros(0, np.uint64)
        keep = np.argsort(priorities, kind="stable")[:k]  # the shard's sample: k smallest priorities
        step = max(1, BLOCK_CELLS // max(rows, 1))
        stats: dict[str, ColumnStats] = {}
        sampled: dict[str, np.ndarray] = {}
        for start in range(0, len(wanted), step):
            block = handle.read_row_group(payload["row_group"], columns=wanted[start:start + step])
            for name, column in zip(wanted[start:start + step], block.columns, strict=True):
                values = _arrow_values(column)
                sample = (values[keep].astype(np.float64) if isinstance(values, np.ndarray)  # take, then widen
                          else _sample_values(values)[keep])
                sampled[name] = sample
                stats[name] = column_stats(values, names, sample[:KLL_SHARD_VALUES] if rows > KLL_SHARD_VALUES
                                           else None)
            del block
    reservoir = Reservoir(k=k, priorities=priorities[keep], columns=sampled, seen=rows)
    return SidePartial(columns=stats, order=[n for n in wanted if n in stats], reservoir=reservoir, rows=rows)


def _frame_partial(frame: Any, names: list[str], bad: list[tuple[str, str]], columns: list[str] | None, seed: int,
                   k: int, exclude: tuple[str, ...]) -> SidePartial:
    wanted = [c for c in (columns or [str(c) for c in frame.columns]) if c not in exclude]
    frame = frame.rename(columns=str)
    sampled: dict[str, np.ndarray] = {}
    for name in [*wanted, *exclude]:  # excluded columns (e.g. the label) are sampled with their rows, never tested
        if name in frame.columns:
            sampled[name] = _sample_values(frame[name])
    reservoir = Reservoir.of(names, sampled, seed, k)
    few = len(names) > KLL_SHARD_VALUES
    stats = {name: column_stats(frame[name], names, reservoir.columns[name][:KLL_SHARD_VALUES] if few else None)
             for name in wanted if name in frame.columns}
    return SidePartial(columns=stats, order=[n for n in wanted if n in stats], reservoir=reservoir, rows=len(names),
                       bad=bad)


def _arrow_values(column: Any) -> Any:
    """An Arrow column as a numpy array when it is plain numbers without nulls (zero copy for one chunk), else
    as the pandas Series the general statistics path reads."""
    import pyarrow as pa

    kind = column.type
    if column.null_count == 0 and (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
        return column.to_numpy()
    return column.to_pandas()


def _sample_values(values: Any) -> np.ndarray:
    import pandas as pd

    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        return values.astype(np.float64, copy=False)
    if values.dtype.kind in "biuf":
        return values.to_numpy(dtype=np.float64)
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
