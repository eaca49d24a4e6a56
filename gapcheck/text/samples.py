"""Text samples: lines of a ``.txt``, a field of ``.jsonl``, a column of CSV/Parquet, a folder of ``.txt`` files.

Every reader is a generator of :class:`TextSample` values and holds one sample (or one CSV chunk / Parquet
batch) at a time, so memory stays flat in the number of samples. Input is hostile: a line longer than the
character limit is skipped while it is read (never held whole), invalid UTF-8 and NUL bytes are bad input,
special files in a folder are never opened. Sample ids are made safe for a terminal here, once
(:func:`gapcheck.report.text.safe_line`), so a control character in a file name or id never reaches one.
"""
from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from gapcheck.errors import InputError, UsageError
from gapcheck.reading import CSV_CHUNK_ROWS, LineGuard, ReadRefused, error_text, open_checked
from gapcheck.report.text import safe_line as _safe_line

DEFAULT_MAX_CHARS = 1_000_000  # a longer string is bad input (a 10 MB "sentence" is a corrupt line, not text)
READ_BLOCK = 1 << 16
TABLE_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet"}


def safe_line(text: object) -> str:
    """:func:`gapcheck.report.text.safe_line`, with a fast path for the usual printable-ASCII id (its identity)."""
    if isinstance(text, str) and text.isascii() and text.isprintable():
        return text
    return _safe_line(text)


@dataclass(frozen=True)
class TextSample:
    """One raw string and its id; ``issue`` (a reason) instead of ``text`` when it is not usable text."""

    id: str
    text: str | None
    issue: str = ""


@dataclass(frozen=True)
class SampleSource:
    """Where the samples are: a file or folder, and the field/column for JSONL, CSV and Parquet."""

    path: Path
    field: str | None = None

    @property
    def kind(self) -> str:
        if self.path.is_dir():
            return "folder"
        suffix = self.path.suffix.lower()
        if suffix == ".jsonl" or suffix == ".ndjson":
            return "jsonl"
        return TABLE_SUFFIXES.get(suffix, "lines")

    def describe(self) -> str:
        return f"{self.path}" + (f":{self.field}" if self.field else "")


def parse_source(spec: str | Path) -> SampleSource:
    """``texts.jsonl:text``, ``reviews.csv:body``, ``lines.txt``, ``folder/`` -> a checked :class:`SampleSource`."""
    text = str(spec)
    if not text.strip():  # Path("") is the working directory: an empty option must not audit every .txt under it
        raise UsageError("text samples: an empty path; give a text file, FILE.jsonl:field, FILE.csv:column or a folder")
    path, field = Path(text), None
    if not path.exists() and ":" in text:
        head, _, tail = text.rpartition(":")
        path, field = Path(head), tail or None
    if not path.exists():
        raise InputError(f"text samples {safe_line(text)!r}: no such file or folder")
    if not path.is_dir():
        _check_regular(path, os.stat(path).st_mode, f"text samples {safe_line(text)!r}")
    source = SampleSource(path, field)
    if source.kind in ("jsonl", "csv", "tsv", "parquet") and not field:
        raise UsageError(f"text samples {safe_line(text)!r}: name the field or column, e.g. {path.name}:text")
    if source.kind in ("lines", "folder") and field:
        raise UsageError(f"text samples {safe_line(text)!r}: a field is only read from .jsonl, .csv or .parquet")
    return source


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _check_regular(path: Path, mode: int, what: str) -> None:
    """Refuse anything but a regular file (after symlinks): reading a FIFO waits for a writer forever, /dev/zero
    never ends, and opening some devices acts on them."""
    if not stat.S_ISREG(mode):
        real = os.path.realpath(path)
        target = f" ({safe_line(real)})" if real != os.path.abspath(path) else ""
        raise InputError(f"{what}: {_file_kind(mode)}{target}, not a regular file; give a text file or a folder")


def open_regular(path: Path, what: str) -> BinaryIO:
    """``path`` opened for reading when it is a regular file, checked on the open descriptor: a file swapped for a
    FIFO after :func:`parse_source` looked is refused too (opened non-blocking: a FIFO does not wait for a writer).
    Links are followed: a samples file may well be a link to a data set."""
    try:
        fd, _ = open_checked(path, follow_links=True)
    except ReadRefused as exc:  # the one check asked for: a regular file
        _check_regular(path, exc.mode, what)
        raise
    try:
        nonblock = getattr(os, "O_NONBLOCK", 0)
        if nonblock:  # back to blocking reads for the parsers the handle goes to (pandas, pyarrow)
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~nonblock)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def iter_samples(source: SampleSource | str | Path, *, max_samples: int | None = None,
                 max_chars: int = DEFAULT_MAX_CHARS) -> Iterator[TextSample]:
    """The source's samples in file order, bad ones included (with their issue), at most ``max_samples`` of them."""
    if not isinstance(source, SampleSource):
        source = parse_source(source)
    readers = {"lines": _lines, "jsonl": _jsonl, "csv": _table, "tsv": _table, "parquet": _parquet, "folder": _folder}
    for count, sample in enumerate(readers[source.kind](source, max_chars)):
        if max_samples is not None and count >= max_samples:
            return
        yield sample


def from_strings(texts: Any, *, max_chars: int = DEFAULT_MAX_CHARS) -> Iterator[TextSample]:
    """Samples from Python values: strings (ids are their positions), ``(id, text)`` pairs, or a ``{id: text}`` mapping."""
    items = texts.items() if isinstance(texts, dict) else enumerate(texts)
    for key, value in items:
        if isinstance(value, tuple) and len(value) == 2:
            key, value = value
        if isinstance(value, bytes):
            yield checked(str(key), value, max_chars)
        elif isinstance(value, str):
            yield checked_text(str(key), value, max_chars)
        else:
            yield TextSample(safe_line(key), None, f"not a string ({type(value).__name__})")


def checked(raw_id: str, data: bytes, max_chars: int) -> TextSample:
    """Bytes -> a sample, or a bad one: not UTF-8, NUL bytes (binary), too long."""
    if b"\x00" in data:
        return TextSample(safe_line(raw_id), None, "NUL bytes (binary data, not text)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return TextSample(safe_line(raw_id), None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})")
    return checked_text(raw_id, text, max_chars)


def checked_text(raw_id: str, text: str, max_chars: int) -> TextSample:
    sample_id = safe_line(raw_id)
    if "\x00" in text:
        return TextSample(sample_id, None, "NUL characters (binary data, not text)")
    if not text.isascii() and any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):  # lone or escaped surrogates
        return TextSample(sample_id, None, "not valid UTF-8 (lone surrogates)")
    if len(text) > max_chars:
        return TextSample(sample_id, None, f"{len(text)} characters, over the {max_chars} character limit")
    return TextSample(sample_id, text)


def _bounded_lines(path: Path, max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes without the newline) per line; None for a line over ``max_bytes``, skipped unread."""
    with open_regular(path, f"text samples {safe_line(path)}") as handle:
        number = 0
        while True:
            line = handle.readline(max_bytes + 1)
            if not line:
                return
            number += 1
            if len(line) > max_bytes and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # drain the rest of the long line in blocks
                    line = handle.readline(READ_BLOCK)
                yield number, None
                continue
            yield number, line.rstrip(b"\n").rstrip(b"\r")


def _lines(source: SampleSource, max_chars: int) -> Iterator[TextSample]:
    name = source.path.name
    for number, data in _bounded_lines(source.path, 4 * max_chars + 4):
        if data is None:
            yield TextSample(f"{safe_line(name)}:{number}", None, f"a line over the {max_chars} character limit")
        elif data.strip():
            yield checked(f"{name}:{number}", data, max_chars)


def _jsonl(source: SampleSource, max_chars: int) -> Iterator[TextSample]:
    name, field = source.path.name, source.field or ""
    for number, data in _bounded_lines(source.path, 4 * max_chars + 1024):
        sample_id = f"{name}:{number}"
        if data is None:
            yield TextSample(safe_line(sample_id), None, f"a line over the {max_chars} character limit")
            continue
        if not data.strip():
            continue
        try:
            record = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            yield TextSample(safe_line(sample_id), None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})")
            continue
        except ValueError as exc:
            yield TextSample(safe_line(sample_id), None, f"not JSON ({str(exc)[:80]})")
            continue
        value = record.get(field) if isinstance(record, dict) else None
        if not isinstance(value, str):
            got = "missing" if not isinstance(record, dict) or field not in record else type(value).__name__
            yield TextSample(safe_line(sample_id), None, f"field {field!r} is {got}, not a string")
            continue
        yield checked_text(sample_id, value, max_chars)


def _cell_samples(name: str, first: int, values: Any, max_chars: int) -> Iterator[TextSample]:
    for offset, value in enumerate(values):
        sample_id = f"{name}:{first + offset}"
        if isinstance(value, str) and value:
            yield _cell_text(sample_id, value, max_chars)
        elif isinstance(value, bytes):
            yield checked(sample_id, value, max_chars)
        else:
            yield TextSample(safe_line(sample_id), None, "an empty cell" if value in (None, "") or value != value
                             else f"not a string ({type(value).__name__})")


def _cell_text(sample_id: str, value: str, max_chars: int) -> TextSample:
    """A CSV cell; one holding surrogateescape'd bytes goes back to its bytes so the finding names the bad byte."""
    if not value.isascii() and any(0xDC80 <= ord(ch) <= 0xDCFF for ch in value):
        try:
            return checked(sample_id, value.encode("utf-8", "surrogateescape"), max_chars)
        except UnicodeEncodeError:
            pass  # not from surrogateescape: checked_text counts it as lone surrogates
    return checked_text(sample_id, value, max_chars)


def _table(source: SampleSource, max_chars: int) -> Iterator[TextSample]:
    """CSV/TSV in chunks through the shared line guard (a runaway line is refused before it is buffered)."""
    import pandas as pd

    name, first = source.path.name, 0
    try:
        with open_regular(source.path, f"text samples {safe_line(name)}") as handle:
            # dtype=object, not str: pandas 3's str dtype is Arrow-backed, and Arrow refuses the surrogateescape'd
            # byte of one bad cell for the whole chunk; as objects the cell reaches checked_text and is counted alone
            chunks = pd.read_csv(LineGuard(handle), usecols=[source.field], dtype=object, chunksize=CSV_CHUNK_ROWS,
                                 sep="\t" if source.kind == "tsv" else ",", encoding_errors="surrogateescape",
                                 keep_default_na=False)
            for chunk in chunks:
                yield from _cell_samples(name, first, chunk[source.field].tolist(), max_chars)
                first += len(chunk)
    except ValueError as exc:
        if "Usecols do not match" in str(exc):
            raise UsageError(f"{safe_line(name)}: no column {source.field!r}") from exc
        yield TextSample(f"{safe_line(name)}:{first}+", None, f"unreadable table from row {first}: {error_text(exc)}")
    except pd.errors.ParserError as exc:
        yield TextSample(f"{safe_line(name)}:{first}+", None, f"unreadable table from row {first}: {error_text(exc)}")


def _parquet(source: SampleSource, max_chars: int) -> Iterator[TextSample]:
    import pyarrow.parquet as pq

    name, first = source.path.name, 0
    with open_regular(source.path, f"text samples {safe_line(name)}") as handle:
        try:
            table = pq.ParquetFile(handle)
        except Exception as exc:  # noqa: BLE001 - a corrupt file is bad input, not a crash
            raise InputError(f"{safe_line(name)}: not a readable Parquet file ({type(exc).__name__})") from exc
        if source.field not in table.schema_arrow.names:
            raise UsageError(f"{safe_line(name)}: no column {source.field!r}")
        for batch in table.iter_batches(batch_size=4096, columns=[source.field]):
            values = batch.column(0).to_pylist()
            yield from _cell_samples(name, first, values, max_chars)
            first += len(values)


def _folder(source: SampleSource, max_chars: int) -> Iterator[TextSample]:
    """Every ``*.txt`` under the folder (sorted), one sample per file; special files are listed, never opened."""
    root = source.path
    for path in sorted(root.rglob("*.txt")):
        sample_id = str(path.relative_to(root))
        try:
            info = os.stat(path)
        except OSError as exc:
            yield TextSample(safe_line(sample_id), None, f"unreadable ({exc.strerror})")
            continue
        if not stat.S_ISREG(info.st_mode):
            yield TextSample(safe_line(sample_id), None, "not a regular file (never opened)")
            continue
        yield _folder_file(path, sample_id, max_chars)


def _folder_file(path: Path, sample_id: str, max_chars: int) -> TextSample:
    """One file's sample; kind and size checked again on the open descriptor (the file may change after the stat)."""
    limit = 4 * max_chars + 4
    try:
        with open_regular(path, sample_id) as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(limit + 1) if size <= limit else b""
    except InputError:
        return TextSample(safe_line(sample_id), None, "not a regular file (never opened)")
    except OSError as exc:
        return TextSample(safe_line(sample_id), None, f"unreadable ({exc.strerror})")
    if size > limit or len(data) > limit:
        return TextSample(safe_line(sample_id), None, f"{max(size, len(data))} bytes, over the {max_chars} "
                          "character limit")
    return checked(sample_id, data, max_chars)
