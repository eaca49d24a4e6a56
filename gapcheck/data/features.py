"""Per-shard feature extraction shared by drift (and leakage's target check): a table shard's columns
as :class:`ColumnStats` plus a :class:`Reservoir` of rows, or an image shard turned into image-property rows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gapcheck.data.readers import iter_frames, iter_images
from gapcheck.data.sketches import ColumnStats, Reservoir, column_stats

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

    def merge(self, other: "SidePartial") -> "SidePartial":
        columns = dict(self.columns)
        for name, stats in other.columns.items():
            columns[name] = columns[name].merge(stats) if name in columns else stats
        order = self.order + [n for n in other.order if n not in self.order]
        return SidePartial(columns=columns, order=order, reservoir=self.reservoir.merge(other.reservoir),
                           rows=self.rows + other.rows, bad=self.bad + other.bad)


def image_rows(payload: dict[str, Any]) -> tuple[Any, list[str], list[tuple[str, str]]]:
    """An image shard as a DataFrame of image properties (per-channel mean/std, brightness, size, aspect)."""
    import pandas as pd

    rows, names, bad = [], [], []
    for item in iter_images(payload):
        if item.error:
            bad.append((item.name, item.error))
            continue
        pixels = np.asarray(item.image.convert("RGB"), dtype=np.float32)
        gray = np.asarray(item.image.convert("L"), dtype=np.float32)
        means = pixels.reshape(-1, 3).mean(axis=0)
        stds = pixels.reshape(-1, 3).std(axis=0)
        height, width = gray.shape
        rows.append((*means.tolist(), *stds.tolist(), float(gray.mean()), width, height, width / height))
        names.append(item.name)
    return pd.DataFrame(rows, columns=list(IMAGE_FEATURES)), names, bad


def side_partial(payload: dict[str, Any], columns: list[str] | None, seed: int, k: int,
                 exclude: tuple[str, ...] = ()) -> SidePartial:
    """Statistics and a row sample of one shard of one side (runs on a worker)."""
    if payload["kind"] == "images" or payload.get("sample_kind") == "images":
        frame, names, bad = image_rows(payload)
        return _frame_partial(frame, names, bad, columns, seed, k, exclude)
    merged = SidePartial(reservoir=Reservoir(k=k))
    for shard in iter_frames(payload):  # CSV files come in chunks: memory per worker stays bounded
        merged = merged.merge(_frame_partial(shard.data, shard.names, list(shard.bad), columns, seed, k, exclude))
    return merged


def _frame_partial(frame: Any, names: list[str], bad: list[tuple[str, str]], columns: list[str] | None, seed: int,
                   k: int, exclude: tuple[str, ...]) -> SidePartial:
    wanted = [c for c in (columns or [str(c) for c in frame.columns]) if c not in exclude]
    frame = frame.rename(columns=str)
    stats: dict[str, ColumnStats] = {}
    sampled: dict[str, np.ndarray] = {}
    for name in wanted:
        if name not in frame.columns:
            continue
        stats[name] = column_stats(frame[name], names)
        sampled[name] = _sample_values(frame[name])
    for name in exclude:  # e.g. the label: sampled with its rows but never tested as a feature
        if name in frame.columns:
            sampled[name] = _sample_values(frame[name])
    return SidePartial(columns=stats, order=[n for n in wanted if n in stats],
                       reservoir=Reservoir.of(names, sampled, seed, k), rows=len(names), bad=bad)


def _sample_values(values: Any) -> np.ndarray:
    import pandas as pd

    if values.dtype.kind in "biuf":
        return values.to_numpy(dtype=np.float64)
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
