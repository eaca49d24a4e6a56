"""What every reader of tables from outside shares, below the data commands (``data/readers.py``) and the text input
(``text/samples.py``): the CSV chunk size, the guard against a runaway line, and a reproducible error text.

Imports only numpy, so the text input that ``--text-samples`` reads through (floor 2) can use it without reaching up
into ``data/`` (remote sources, engines).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np

CSV_CHUNK_ROWS = 100_000  # a CSV file is read in chunks so a worker never holds all of it
MAX_CSV_LINE = 16 * 1024 * 1024  # a "line" longer than this is refused before the parser buffers all of it

_ADDRESS = re.compile(r"<([\w.]+) object at 0x[0-9a-fA-F]+>")


def error_text(exc: BaseException) -> str:
    """``Type: message`` without object addresses (``<_io.BytesIO object at 0x7f..>``), so reports are reproducible."""
    text = _ADDRESS.sub(r"<\1>", str(exc))
    return f"{type(exc).__name__}: {text[:200]}"


class LineGuard:
    """A binary file wrapper that refuses a run of more than ``limit`` (:data:`MAX_CSV_LINE`) bytes without a newline.

    pandas' parser buffers a whole line (a 1 GB line is 1 GB of memory per worker, then more for the
    cell); counting as it reads costs one vectorized newline scan per block (~1 ms per 256 KiB)."""

    def __init__(self, handle: Any, limit: int | None = None) -> None:
        self._handle, self._run, self._offset = handle, 0, 0
        self._limit = MAX_CSV_LINE if limit is None else limit

    def read(self, size: int = -1) -> bytes:
        block = self._handle.read(size)
        newlines = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
        if len(newlines):
            inner = int(np.diff(newlines).max()) - 1 if len(newlines) > 1 else 0
            longest = max(self._run + int(newlines[0]), inner)
            self._run = len(block) - int(newlines[-1]) - 1
        else:
            self._run += len(block)
            longest = self._run
        if max(longest, self._run) > self._limit:
            raise ValueError(f"a line longer than {self._limit} bytes near byte {self._offset + len(block)}")
        self._offset += len(block)
        return block

    def __iter__(self) -> Iterator[bytes]:  # pandas checks for a file-like object by read/__iter__
        return iter(self.readline, b"")

    def readline(self, size: int = -1) -> bytes:
        return self.read(size if size and size > 0 else 65_536)
