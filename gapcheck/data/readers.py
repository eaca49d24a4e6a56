"""Worker-side reading of one shard payload (see :mod:`gapcheck.data.sources` for the planning side).

Everything here runs on a worker: it opens the files itself (local paths directly, URLs through
fsspec), so bytes never travel through the driver. A corrupt item is yielded with its error, for
the job to count and list; nothing is dropped silently.
"""
from __future__ import annotations

import codecs
import contextlib
import functools
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gapcheck.alarm import interval_alarm
from gapcheck.data.hashing import decode_image, image_from_array
from gapcheck.data.lines import CsvLines, line_name, row_name
from gapcheck.data.remote import is_remote, open_file, read_all, shown
from gapcheck.errors import InputError, UsageError
from gapcheck.limits import MAX_SAMPLE_BYTES
from gapcheck.reading import CSV_CHUNK_ROWS, MAX_CSV_LINE, LineGuard, error_text

MAX_FILE_BYTES = MAX_SAMPLE_BYTES  # an "image" larger than this is refused before it is read (one limit with preprocess)


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
    if is_remote(url):
        data = read_all(url, MAX_FILE_BYTES)
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


SAMPLE_DEADLINE_S = 60.0  # one Dataset sample that takes longer is reported as unreadable
MAX_TIMEOUTS_PER_SHARD = 2  # after this many, the shard's other samples are reported unread, not waited for


def sample_deadline(seconds: float) -> contextlib.AbstractContextManager[None]:
    """Raise :class:`TimeoutError` in the block after ``seconds`` of wall time (SIGALRM: the main thread of a POSIX
    process, which is where the serial and local engines run samples; elsewhere no deadline is set)."""
    return interval_alarm(seconds, lambda: TimeoutError(f"no sample within {seconds:g} s"))


@functools.lru_cache(maxsize=4)
def load_dataset(location: str) -> Any:
    """Call ``pkg.module:attr`` (once per process) and return the Dataset it builds."""
    module_name, _, attribute = location.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot import {location}: {exc}") from exc
    if not callable(target) or hasattr(target, "__getitem__"):
        return target
    try:
        with sample_deadline(SAMPLE_DEADLINE_S):
            return target()
    except Exception as exc:  # noqa: BLE001 - the user's factory failing is bad input, not a gapcheck failure
        raise InputError(f"calling {location}() raised {error_text(exc)}") from exc


def read_sample(dataset: Any, index: int) -> tuple[np.ndarray, Any]:
    """``dataset[index]`` as (numeric array, label), within :data:`SAMPLE_DEADLINE_S`; raises on anything else."""
    with sample_deadline(SAMPLE_DEADLINE_S):
        array, label = _split_sample(dataset[index])
    if array.dtype.kind not in "biuf":
        raise TypeError(f"the sample is {array.dtype} {array.shape}, not a numeric tensor (expected (tensor, label))")
    return array, label


def _split_sample(sample: Any) -> tuple[np.ndarray, Any]:
    if isinstance(sample, (tuple, list)) and len(sample) >= 2:
        value, label = sample[0], sample[1]
    else:
        value, label = sample, None
    if hasattr(label, "item") and getattr(label, "ndim", 0) == 0:
        label = label.item()
    if label is not None and not isinstance(label, (str, int, float, bool)):
        label = str(label)[:200]  # a label must hash and compare; anything else is compared by its text
    array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    return array, label


PROBE_SAMPLES = 10  # samples tried on the driver to tell images from feature rows


def dataset_sample_kind(location: str, size: int) -> str:
    """"images" when the Dataset yields 2-D/3-D samples, "table" for 1-D feature vectors (from the first sample
    that reads; the others are reported by the workers)."""
    dataset = load_dataset(location)
    errors = []
    for index in range(min(size, PROBE_SAMPLES)):
        try:
            array, _ = read_sample(dataset, index)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"[{index}]: {error_text(exc)}")
            if sum("TimeoutError" in e for e in errors) >= MAX_TIMEOUTS_PER_SHARD:
                break
            continue
        return "table" if array.ndim <= 1 else "images"
    if errors:
        raise InputError(f"{location}: none of the first {len(errors)} sample(s) could be read "
                         f"({'; '.join(errors[:3])})")
    return "images"


def _dataset_samples(payload: dict[str, Any]) -> Iterator[tuple[str, np.ndarray | None, Any, str | None]]:
    """(name, array, label, error) per index of the shard; after repeated timeouts the rest is reported unread."""
    dataset = load_dataset(payload["callable"])
    timeouts = 0
    for index in range(payload["start"], payload["stop"]):
        name = f"{payload['split']}:{index}"
        if timeouts >= MAX_TIMEOUTS_PER_SHARD:
            yield name, None, None, f"sample not read: {timeouts} earlier sample(s) of this shard timed out"
            continue
        try:
            array, label = read_sample(dataset, index)
        except Exception as exc:  # noqa: BLE001 - a failing sample is an item to report, not a crash
            timeouts += isinstance(exc, TimeoutError)
            yield name, None, None, f"sample could not be read: {error_text(exc)}"
            continue
        yield name, array, label, None


def _dataset_images(payload: dict[str, Any]) -> Iterator[ImageItem]:
    for name, array, label, error in _dataset_samples(payload):
        item = ImageItem(name=name, label=label, error=error)
        if array is not None:
            try:
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


def iter_frames(payload: dict[str, Any]) -> Iterator[Frame]:
    """A table shard as one or more frames (CSV files in chunks of :data:`CSV_CHUNK_ROWS` rows)."""
    if payload["kind"] == "dataset":
        yield _dataset_frame(payload)
        return
    if payload["format"] != "csv":
        yield read_frame(payload)
        return
    import pandas as pd

    first = 0
    try:
        with open_file(payload["url"]) as handle, _csv_lines(payload["url"]) as lines:
            for chunk, malformed in _csv_chunks(handle):
                numbers = lines.take(len(chunk)) if lines is not None else None  # the rows' lines, in step
                yield _clean_rows(_named(chunk, payload, first, numbers), payload["name"], malformed)
                first += len(chunk)
    except pd.errors.EmptyDataError:
        return  # a zero-byte file: no rows (its split is empty, not unreadable)
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError, OSError) as exc:
        # Not retried as a shard failure: the same bytes (or permissions) fail the same way. The rows read so far
        # stay in; a file with none read makes its split unreadable (exit 2) when nothing else of it was read.
        where = f" from row {first}" if first else ""
        yield Frame(pd.DataFrame(), [], [(f"{payload['name']}{where}", f"unreadable table: {_csv_reason(exc)}")])


def _csv_lines(url: str) -> contextlib.AbstractContextManager[CsvLines | None]:
    """The reader of a local CSV's row lines (beside pandas, see :mod:`gapcheck.data.lines`); None for a remote one."""
    return contextlib.nullcontext(None) if is_remote(url) else CsvLines(url, _MARK_ERRORS)


# Bytes that are not UTF-8 are read as U+FDD0, a Unicode noncharacter (reserved for internal use, never in text a
# user wrote; U+FFFD would be, in files that went through a lossy pipeline): the rows holding it are the bad ones.
_MARK = "\ufdd0"
_MARK_ERRORS = "gapcheck-not-utf8"


def _mark_not_utf8(error: UnicodeError) -> tuple[str, int]:
    return _MARK, getattr(error, "end", 0)


codecs.register_error(_MARK_ERRORS, _mark_not_utf8)

_SKIPPED_LINE = re.compile(r"Skipping line (\d+): ([^\n]*)")
_FIRST_ROW_TOO_LONG = "Length of header or names does not match length of data"


def _csv_chunks(handle: Any) -> Iterator[tuple[Any, list[tuple[str, str]]]]:
    """(chunk, malformed lines) per :data:`CSV_CHUNK_ROWS` rows. A row with the wrong number of fields is skipped by
    the parser and returned here (line number, why) to be counted; bytes that are not UTF-8 become :data:`_MARK`, whose
    rows :func:`_clean_rows` counts. Either way one bad row never makes the whole file unreadable."""
    import warnings

    import pandas as pd

    # index_col=False: a first data row with more fields than the header would otherwise become pandas' implicit
    # index (its leading fields read as row labels, the row counted good); pandas truncates it instead and warns,
    # and that row is dropped here and counted like any other row with the wrong number of fields.
    reader = pd.read_csv(LineGuard(handle, MAX_CSV_LINE), low_memory=False, chunksize=CSV_CHUNK_ROWS, on_bad_lines="warn",
                         encoding_errors=_MARK_ERRORS, index_col=False)
    with reader:
        while True:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", pd.errors.ParserWarning)
                try:
                    chunk = next(reader)
                except StopIteration:
                    return
            messages = [str(w.message) for w in caught if issubclass(w.category, pd.errors.ParserWarning)]
            malformed = [(f"line {line}", why) for m in messages for line, why in _SKIPPED_LINE.findall(m)]
            if any(_FIRST_ROW_TOO_LONG in m for m in messages) and len(chunk):
                chunk = chunk.iloc[1:]
                malformed.insert(0, ("first data row", "more fields than the header"))
            yield chunk, malformed


_NOT_UTF8 = "not UTF-8 text: re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"


def _clean_rows(frame: Frame, file_name: str, malformed: list[tuple[str, str]]) -> Frame:
    """Drop (and list as bad) the rows holding bytes that were not UTF-8; list the parser's malformed lines.
    A column that was text only because of a bad row is numeric again once the row is out."""
    import pandas as pd

    bad = frame.bad + [(f"{file_name} {where}", f"malformed row: {why}") for where, why in malformed]
    data = frame.data
    text = [c for c in data.columns if data[c].dtype.kind not in "biufcmM"]
    hit = {c: data[c].astype(str).str.contains(_MARK, regex=False).to_numpy() for c in text}
    mask = np.zeros(len(data), dtype=bool)
    for column_hit in hit.values():
        mask |= column_hit
    if not mask.any():
        return Frame(data, frame.names, bad)
    bad += [(name, _NOT_UTF8) for name, drop in zip(frame.names, mask.tolist(), strict=True) if drop]
    data = data.loc[~mask].reset_index(drop=True)
    for column in (c for c, column_hit in hit.items() if column_hit.any()):
        with contextlib.suppress(ValueError, TypeError):
            data[column] = pd.to_numeric(data[column])
    return Frame(data, [n for n, drop in zip(frame.names, mask.tolist(), strict=True) if not drop], bad)


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
        with parquet_file(url) as handle:
            frame = handle.read_row_group(payload["row_group"]).to_pandas()
    elif fmt == "csv":
        with open_file(url) as handle:
            frame = pd.read_csv(handle, low_memory=False, index_col=False)  # see _csv_chunks
    elif fmt == "npy":
        frame = _matrix_frame(_load_npy(url, payload["start"], payload["stop"]), payload.get("columns"))
    else:
        frame = _npz_frame(url, payload.get("columns"))
    return _named(frame, payload, payload.get("first_row", 0))


@contextlib.contextmanager
def parquet_file(url: str) -> Iterator[Any]:
    """A ``pyarrow.parquet.ParquetFile``: local paths through Arrow's own (memory-mapped) reader, URLs through
    :func:`gapcheck.data.remote.open_file` (every request under the remote deadline)."""
    import pyarrow.parquet as pq

    if "://" not in url:
        with pq.ParquetFile(url, memory_map=True) as local:
            yield local
        return
    with open_file(url) as handle, pq.ParquetFile(handle) as remote:
        yield remote


def row_names(payload: dict[str, Any], rows: int) -> list[str]:
    """The item names of a (non-CSV) table shard's rows (``file row N``), as :func:`iter_frames` gives them."""
    first = payload.get("first_row", 0)
    return [row_name(payload["name"], first + i) for i in range(rows)]


def _named(frame: Any, payload: dict[str, Any], first: int, lines: list[int] | None = None) -> Frame:
    """Rows named ``file:LINE`` (a CSV's 1-based line, header counted) or ``file row N`` (the 0-based row index);
    requested columns checked (a missing one is a usage error, raised at once)."""
    columns = payload.get("columns") if payload["format"] not in ("npy", "npz") else None
    if columns:
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise UsageError(f"{payload['name']}: no column(s) {', '.join(missing)}")
    name = payload["name"]
    names = ([line_name(name, line) for line in lines] if lines is not None else
             [row_name(name, first + i) for i in range(len(frame))])
    return Frame(frame.reset_index(drop=True), names, [])


def _load_npy(url: str, start: int, stop: int) -> np.ndarray:
    if "://" not in url:
        return np.asarray(np.load(url, mmap_mode="r", allow_pickle=False)[start:stop])
    with open_file(url) as handle:
        return np.load(handle, allow_pickle=False)[start:stop]


def _matrix_frame(matrix: np.ndarray, columns: list[str] | None) -> Any:
    import pandas as pd

    matrix = matrix.reshape(len(matrix), -1) if matrix.ndim != 2 else matrix
    names = list(columns) if columns else [f"f{j}" for j in range(matrix.shape[1])]
    if len(names) != matrix.shape[1]:
        raise UsageError(f"{len(names)} column name(s) given for a matrix with {matrix.shape[1]} column(s)")
    return pd.DataFrame(matrix, columns=names)


def _npz_frame(url: str, columns: list[str] | None) -> Any:
    import pandas as pd

    with open_file(url) as handle, np.load(handle, allow_pickle=False) as archive:
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
        raise UsageError(f"{shown(url)}: arrays of different lengths {sorted(lengths)}")
    return pd.concat(parts, axis=1) if parts else pd.DataFrame()


def _dataset_frame(payload: dict[str, Any]) -> Frame:
    import pandas as pd

    rows: list[np.ndarray] = []
    labels: list[Any] = []
    names: list[str] = []
    bad: list[tuple[str, str]] = []
    for name, array, label, error in _dataset_samples(payload):
        if array is None:
            bad.append((name, error or "sample could not be read"))
            continue
        row = np.asarray(array, dtype=np.float64).ravel()
        if rows and len(row) != len(rows[0]):
            bad.append((name, f"sample could not be read: {len(row)} features, the shard's first sample has "
                              f"{len(rows[0])}"))
            continue
        rows.append(row)
        labels.append(label)
        names.append(name)
    width = max((len(r) for r in rows), default=0)
    frame = pd.DataFrame([r for r in rows], columns=[f"f{j}" for j in range(width)]) if rows else pd.DataFrame()
    if rows and any(label is not None for label in labels):
        frame["label"] = labels
    return Frame(frame, names, bad)
