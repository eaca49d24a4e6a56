"""Worker-side reading of one shard payload (see :mod:`gapcheck.data.sources` for the planning side).

Everything here runs on a worker: it opens the files itself (local paths directly, URLs through
fsspec), so bytes never travel through the driver. A corrupt item is yielded with its error, for
the job to count and list; nothing is dropped silently.
"""
from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gapcheck.data.hashing import decode_image, image_from_array
from gapcheck.errors import UsageError

MAX_FILE_BYTES = 512 * 1024 * 1024  # an "image" larger than this is refused before it is read


_ADDRESS = re.compile(r"<([\w.]+) object at 0x[0-9a-fA-F]+>")


def error_text(exc: BaseException) -> str:
    """``Type: message`` without object addresses (``<_io.BytesIO object at 0x7f..>``), so reports are reproducible."""
    text = _ADDRESS.sub(r"<\1>", str(exc))
    return f"{type(exc).__name__}: {text[:200]}"


@dataclass
class ImageItem:
    name: str
    label: Any = None
    data: bytes | None = None  # file bytes (None for a Dataset's tensors)
    image: Any = None  # decoded PIL image
    error: str | None = None


def read_bytes(url: str) -> bytes:
    if "://" not in url:  # a local path: plain open() is ~10x cheaper per file than fsspec's
        with open(url, "rb") as local:
            data = local.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"over the {MAX_FILE_BYTES} byte limit")
        return data
    import fsspec

    with fsspec.open(url, "rb") as handle:
        size = getattr(handle, "size", None)
        if size is not None and size > MAX_FILE_BYTES:
            raise ValueError(f"{size} bytes is over the {MAX_FILE_BYTES} byte limit")
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"over the {MAX_FILE_BYTES} byte limit")
    return data


def iter_images(payload: dict[str, Any]) -> Iterator[ImageItem]:
    if payload["kind"] == "dataset":
        yield from _dataset_images(payload)
        return
    labels = payload.get("labels") or [None] * len(payload["urls"])
    for url, name, label in zip(payload["urls"], payload["names"], labels, strict=True):
        item = ImageItem(name=f"{payload['split']}:{name}", label=label)
        try:
            item.data = read_bytes(url)
            item.image = decode_image(item.data)
        except Exception as exc:  # noqa: BLE001 - a corrupt image is an item to report, not a crash
            item.error = f"unreadable image: {error_text(exc)}"
        yield item


@functools.lru_cache(maxsize=4)
def load_dataset(location: str) -> Any:
    """Call ``pkg.module:attr`` (once per process) and return the Dataset it builds."""
    module_name, _, attribute = location.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot import {location}: {exc}") from exc
    return target() if callable(target) and not hasattr(target, "__getitem__") else target


def _split_sample(sample: Any) -> tuple[np.ndarray, Any]:
    if isinstance(sample, (tuple, list)) and len(sample) >= 2:
        value, label = sample[0], sample[1]
    else:
        value, label = sample, None
    if hasattr(label, "item") and getattr(label, "ndim", 0) == 0:
        label = label.item()
    array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    return array, label


def dataset_sample_kind(location: str) -> str:
    """"images" when the Dataset yields 2-D/3-D samples, "table" for 1-D feature vectors."""
    dataset = load_dataset(location)
    if len(dataset) == 0:
        return "images"
    array, _ = _split_sample(dataset[0])
    return "table" if array.ndim <= 1 else "images"


def _dataset_images(payload: dict[str, Any]) -> Iterator[ImageItem]:
    dataset = load_dataset(payload["callable"])
    for index in range(payload["start"], payload["stop"]):
        item = ImageItem(name=f"{payload['split']}:{index}")
        try:
            array, item.label = _split_sample(dataset[index])
            item.image = image_from_array(array)
        except Exception as exc:  # noqa: BLE001
            item.error = f"sample could not be read: {error_text(exc)}"
        yield item


@dataclass
class Frame:
    """One shard of a table: the rows, their names, and cells/rows that could not be used."""

    data: Any  # pandas DataFrame
    names: list[str]
    bad: list[tuple[str, str]]


CSV_CHUNK_ROWS = 100_000  # a CSV file is one shard, read in chunks so a worker never holds all of it


def iter_frames(payload: dict[str, Any]) -> Iterator[Frame]:
    """A table shard as one or more frames (CSV files in chunks of :data:`CSV_CHUNK_ROWS` rows)."""
    if payload["kind"] == "dataset":
        yield _dataset_frame(payload)
        return
    if payload["format"] != "csv":
        yield read_frame(payload)
        return
    import fsspec
    import pandas as pd

    first = 0
    try:
        with fsspec.open(payload["url"], "rb") as handle:
            for chunk in pd.read_csv(LineGuard(handle), low_memory=False, chunksize=CSV_CHUNK_ROWS):
                yield _named(chunk, payload, first)
                first += len(chunk)
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
        # Not retried as a shard failure: the same bytes fail the same way. The rows read so far stay in.
        where = f" from row {first}" if first else ""
        yield Frame(pd.DataFrame(), [], [(f"{payload['name']}{where}", f"unreadable table: {_csv_reason(exc)}")])


MAX_CSV_LINE = 16 * 1024 * 1024  # a "line" longer than this is refused before the parser buffers all of it


class LineGuard:
    """A binary file wrapper that refuses a run of more than :data:`MAX_CSV_LINE` bytes without a newline.

    pandas' parser buffers a whole line (a 1 GB line is 1 GB of memory per worker, then more for the
    cell); counting as it reads costs one ``rfind`` per block."""

    def __init__(self, handle: Any, limit: int = MAX_CSV_LINE) -> None:
        self._handle, self._limit, self._run, self._offset = handle, limit, 0, 0

    def read(self, size: int = -1) -> bytes:
        block = self._handle.read(size)
        newline = block.rfind(b"\n")
        self._run = len(block) - newline - 1 if newline >= 0 else self._run + len(block)
        if self._run > self._limit:
            raise ValueError(f"a line longer than {self._limit} bytes near byte {self._offset + len(block)}")
        self._offset += len(block)
        return block

    def __iter__(self) -> Iterator[bytes]:  # pandas checks for a file-like object by read/__iter__
        return iter(self.readline, b"")

    def readline(self, size: int = -1) -> bytes:
        return self.read(size if size and size > 0 else 65_536)


def _csv_reason(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return (f"not UTF-8 text ({exc.reason} at byte {exc.start}); re-save the file as UTF-8 "
                f"(e.g. iconv -f latin1 -t utf-8)")
    return error_text(exc)


def read_frame(payload: dict[str, Any]) -> Frame:
    """A whole table shard as one frame (CSV: the whole file; prefer :func:`iter_frames`)."""
    import pandas as pd

    if payload["kind"] == "dataset":
        return _dataset_frame(payload)
    fmt, url = payload["format"], payload["url"]
    if fmt in ("parquet", "pq"):
        import fsspec
        import pyarrow.parquet as pq

        with fsspec.open(url, "rb") as handle:
            frame = pq.ParquetFile(handle).read_row_group(payload["row_group"]).to_pandas()
    elif fmt == "csv":
        import fsspec

        with fsspec.open(url, "rb") as handle:
            frame = pd.read_csv(handle, low_memory=False)
    elif fmt == "npy":
        frame = _matrix_frame(_load_npy(url, payload["start"], payload["stop"]), payload.get("columns"))
    else:
        frame = _npz_frame(url, payload.get("columns"))
    return _named(frame, payload, payload.get("first_row", 0))


def _named(frame: Any, payload: dict[str, Any], first: int) -> Frame:
    """Rows named ``file:row``; requested columns checked (a missing one is a usage error, raised at once)."""
    columns = payload.get("columns") if payload["format"] not in ("npy", "npz") else None
    if columns:
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise UsageError(f"{payload['name']}: no column(s) {', '.join(missing)}")
    names = [f"{payload['name']}:{first + i}" for i in range(len(frame))]
    return Frame(frame.reset_index(drop=True), names, [])


def _load_npy(url: str, start: int, stop: int) -> np.ndarray:
    import fsspec

    if "://" not in url:
        return np.asarray(np.load(url, mmap_mode="r", allow_pickle=False)[start:stop])
    with fsspec.open(url, "rb") as handle:
        return np.load(handle, allow_pickle=False)[start:stop]


def _matrix_frame(matrix: np.ndarray, columns: list[str] | None) -> Any:
    import pandas as pd

    matrix = matrix.reshape(len(matrix), -1) if matrix.ndim != 2 else matrix
    names = list(columns) if columns else [f"f{j}" for j in range(matrix.shape[1])]
    if len(names) != matrix.shape[1]:
        raise UsageError(f"{len(names)} column name(s) given for a matrix with {matrix.shape[1]} column(s)")
    return pd.DataFrame(matrix, columns=names)


def _npz_frame(url: str, columns: list[str] | None) -> Any:
    import fsspec
    import pandas as pd

    with fsspec.open(url, "rb") as handle, np.load(handle, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    parts = []
    for key, array in arrays.items():
        if array.ndim == 2:
            parts.append(_matrix_frame(array, columns if columns and len(columns) == array.shape[1] else
                                       [f"{key}_{j}" for j in range(array.shape[1])]))
        elif array.ndim == 1:
            parts.append(pd.DataFrame({key: array}))
    lengths = {len(p) for p in parts}
    if len(lengths) > 1:
        raise UsageError(f"{url}: arrays of different lengths {sorted(lengths)}")
    return pd.concat(parts, axis=1) if parts else pd.DataFrame()


def _dataset_frame(payload: dict[str, Any]) -> Frame:
    import pandas as pd

    dataset = load_dataset(payload["callable"])
    rows, labels, names, bad = [], [], [], []
    for index in range(payload["start"], payload["stop"]):
        name = f"{payload['split']}:{index}"
        try:
            array, label = _split_sample(dataset[index])
        except Exception as exc:  # noqa: BLE001
            bad.append((name, f"sample could not be read: {error_text(exc)}"))
            continue
        rows.append(np.asarray(array, dtype=np.float64).ravel())
        labels.append(label)
        names.append(name)
    width = max((len(r) for r in rows), default=0)
    frame = pd.DataFrame([r for r in rows], columns=[f"f{j}" for j in range(width)]) if rows else pd.DataFrame()
    if rows and any(label is not None for label in labels):
        frame["label"] = labels
    return Frame(frame, names, bad)
