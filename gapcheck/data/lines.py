"""Where a table row is in its file: a CSV row's 1-based line (header counted), any other row's index.

pandas numbers the rows it parses 0, 1, 2 ...; that number printed as ``file:45`` reads like line 45, which it is
not (the header is line 1, and blank lines, rows with too many fields and quoted fields holding newlines shift
it further: a new user's SARIF pointed at the wrong row). :class:`CsvLines` reads the same file beside pandas,
in step with its chunks (at most a 1 MiB block ahead), with pandas' skips: blank or blank-looking lines and rows
with more fields than the header are not rows. While no quote has been seen every line is one record, and a
vectorized scan counts each line's commas and blank bytes (~0.4x pandas' own parse); from the first quote (or lone
carriage return) Python's ``csv`` module reads the rest (the same quoting rules: ``"`` quotes, doubled quotes, the
excel dialect pandas' C parser follows). If the two readings disagree (the file ran out, a field over the csv
module's limit), the rest of that file is named by row index instead: never a wrong line. Remote CSVs are named
by row index (a second read of the file would double the traffic and the deadline).

Names: ``file.csv:47`` (line 47, header counted), ``file.parquet row 45`` (the 0-based row index, as pandas and
pyarrow number rows; also ``.npy``/``.npz`` and a CSV whose lines are not known).
"""
from __future__ import annotations

import contextlib
import csv
import io
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gapcheck.reading import MAX_CSV_LINE


def line_name(name: str, line: int) -> str:
    return f"{name}:{line}"


def row_name(name: str, row: int) -> str:
    return f"{name} row {row}"


class CsvLines:
    """The 1-based start line of each row pandas reads from the CSV at ``url``, handed out chunk by chunk."""

    def __init__(self, url: str, errors: str) -> None:
        self._url, self._errors = url, errors
        self._stack = contextlib.ExitStack()
        self._lines: Iterator[np.ndarray] | None = None
        self._ready = np.zeros(0, np.int64)  # lines read ahead of pandas' chunks
        self.broken = False

    def __enter__(self) -> "CsvLines":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def take(self, count: int) -> list[int] | None:
        """The lines of the next ``count`` rows, or None from the first disagreement on (then rows go by index)."""
        if self.broken:
            return None
        try:
            if self._lines is None:
                self._lines = self._start()
            while len(self._ready) < count:
                more = next(self._lines, None)
                if more is None:
                    break
                self._ready = np.concatenate([self._ready, more])
        except (csv.Error, OSError, ValueError):
            self._ready = self._ready[:0]
        if len(self._ready) < count:
            self.broken = True
            self._stack.close()
            return None
        lines, self._ready = self._ready[:count].tolist(), self._ready[count:]
        return lines

    def _start(self) -> Iterator[np.ndarray]:
        from gapcheck.data.remote import open_file

        handle = self._stack.enter_context(open_file(self._url))
        return _scanned_lines(handle, self._stack, self._errors)


@dataclass
class _Scan:
    """Where the byte scan stands: the next line's number and byte offset, and the header's width once seen."""

    line: int = 1
    offset: int = 0
    width: int | None = None


BLOCK = 1 << 20


def _scanned_lines(handle: Any, stack: contextlib.ExitStack, errors: str) -> Iterator[np.ndarray]:
    """Row lines by a vectorized newline scan while the file holds no quote (then every line is one record: the
    usual numeric table, ~30x cheaper than the csv module), by the csv module from the first line with a quote
    (a quoted field may hold commas and newlines) or a lone carriage return (an old Mac line end)."""
    scan, carry = _Scan(), b""
    while True:
        block = handle.read(BLOCK)
        data = carry + block
        if b'"' in data or (b"\r" in data and data.count(b"\r") != data.count(b"\r\n")):
            yield from _csv_lines_from(handle, stack, errors, scan)
            return
        cut = data.rfind(b"\n") + 1 if block else len(data)  # complete lines only, unless the file ended
        yield _block_lines(data[:cut], scan, final=not block)
        carry = data[cut:]
        if len(carry) > MAX_CSV_LINE:
            raise ValueError("a line longer than the CSV line limit")  # pandas refuses it too: lines end here
        if not block:
            return


def _block_lines(data: bytes, scan: _Scan, final: bool) -> np.ndarray:
    """Row lines of ``data``, whole lines without quotes; ``scan`` moved past them. Per line its commas and blank
    bytes are summed by one ``reduceat`` each (no per-byte running sums, no position arrays)."""
    codes = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(codes == 10)
    if final and len(codes) and (not len(ends) or ends[-1] != len(codes) - 1):
        ends = np.append(ends, len(codes))  # the last line without a line end
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.intp)
    if not len(ends):
        return np.zeros(0, np.int64)

    def counted(mask: np.ndarray) -> np.ndarray:  # per line: from its start to the next line's (its end included)
        return np.add.reduceat(mask.view(np.uint8), starts, dtype=np.int32)

    blank = (codes == 32) | (codes == 9) | (codes == 13)  # space, tab, carriage return: a line of only these is blank
    content = (ends - starts) - counted(blank) > 0
    fields = counted(codes == 44) + 1
    numbers = scan.line + np.arange(len(ends))
    if scan.width is None and content.any():
        header = int(np.argmax(content))
        scan.width = int(fields[header])
        content[header] = False
    scan.line += len(ends)
    scan.offset += len(data)
    return numbers[content & (fields <= (scan.width or 0))]


def _csv_lines_from(handle: Any, stack: contextlib.ExitStack, errors: str, scan: _Scan) -> Iterator[np.ndarray]:
    """The rest of the file through the csv module, from the scan's line (a record boundary: no quote before)."""
    if csv.field_size_limit() < MAX_CSV_LINE:  # pandas reads fields up to the line limit: so must this reading
        csv.field_size_limit(MAX_CSV_LINE)
    handle.seek(scan.offset)
    text = stack.enter_context(io.TextIOWrapper(handle, encoding="utf-8-sig" if scan.offset == 0 else "utf-8",
                                                errors=errors, newline=""))
    lines = row_lines(csv.reader(text), scan.line, scan.width)
    while True:
        batch = np.fromiter(itertools.islice(lines, 65_536), np.int64)
        if not len(batch):
            return
        yield batch


def row_lines(reader: Any, first: int = 1, width: int | None = None) -> Iterator[int]:
    """Start lines of the data rows of a ``csv.reader`` (its first record on line ``first``) as pandas reads them:
    the first non-blank record is the header (unless its ``width`` is known); blank records (none, or one blank
    field: pandas' skip_blank_lines) and records wider than the header (pandas skips them as bad lines, or drops
    the first data row it truncated) are no rows."""
    start = first
    for record in reader:
        line, start = start, first + reader.line_num
        if not record or (len(record) == 1 and not record[0].strip()):
            continue
        if width is None:
            width = len(record)
            continue
        if len(record) <= width:
            yield line


_LINE = re.compile(r"^(.*):(\d+)$")
_ROW = re.compile(r"^(.*) row (\d+)$")


def shown_path(url: str) -> str:
    """Where a table file is, for a finding's location: relative to the working folder when under it (SARIF's
    ``%SRCROOT%``), else absolute; a URL as :func:`gapcheck.data.remote.shown` prints it (credentials hidden)."""
    import os

    from gapcheck.data.remote import shown

    if "://" in url:
        return shown(url)
    path = os.path.abspath(url)
    relative = os.path.relpath(path, os.getcwd())
    return path if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


def item_location(item: str, files: dict[str, str]) -> tuple[str, int | None, int | None] | None:
    """(file location, line, row index) of a table row item named by :func:`line_name` / :func:`row_name` in a
    split whose files are ``files`` (display name → :func:`shown_path`); None for anything else (an image)."""
    for pattern, is_line in ((_LINE, True), (_ROW, False)):
        match = pattern.match(item)
        if match and match[1] in files:
            number = int(match[2])
            return files[match[1]], number if is_line else None, None if is_line else number
    return None
