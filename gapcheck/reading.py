"""What every reader of files from outside shares, below the data commands (``data/readers.py``), the text input
(``text/samples.py``), the export cache (``model/cache.py``) and the golden bundle: the CSV chunk size, the guard
against a runaway line, a reproducible error text, and the one checked open and exact read of a hostile file
(:func:`open_checked`, :func:`read_exact`, :func:`read_exact_unfilled`).

Imports only the standard library (numpy when a :class:`LineGuard` reads), so the text input that ``--text-samples``
reads through (floor 2) and ``model/`` can use it without reaching up into ``data/`` (remote sources, engines), and a
light command (``gapcheck cache info``) imports no numpy through it.
"""
from __future__ import annotations

import enum
import os
import re
import stat
from collections.abc import Collection, Iterator
from typing import Any, NamedTuple

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
        import numpy as np  # here, not at the top: the module's checked reads serve commands that load no numpy

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


# --- the checked open and the exact read ----------------------------------------------------------------------------
# One way to take a file from a place others may write to (a shared cache folder, a bundle someone sent, a samples
# folder): what is checked is the open descriptor, never the name, so nothing can be swapped between check and read.

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # absent on Windows: there a link is looked for just before the open
# O_NONBLOCK: opening a FIFO does not wait for a writer (it is then refused on the descriptor, never read); it means
# nothing for a regular file. O_BINARY: no newline translation on Windows. Python itself opens non-inheritable.
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


class Refusal(enum.Enum):
    """Why a file was not handed over; each caller words it its own way (its tests pin its words)."""

    LINK = "is a symbolic link"
    NOT_REGULAR = "is not a regular file"
    OWNER = "belongs to an untrusted user"
    SIZE = "does not have the size expected"
    TOO_LARGE = "is larger than the limit"
    SHRANK = "was cut short while read"
    GREW = "grew while read"


class ReadRefused(Exception):
    """A file :func:`open_checked` or :func:`read_exact` refused: the ``reason`` and the numbers that prove it.

    ``size``: the file's size (for SHRANK/GREW: the bytes read); ``mode`` and ``uid``: from the descriptor;
    ``expected`` and ``limit``: what was asked for. A plain exception (not OSError), so no ``except OSError`` of a
    caller takes it for an I/O error by accident."""

    def __init__(self, reason: Refusal, *, size: int = 0, mode: int = 0, uid: int = -1, expected: int | None = None,
                 limit: int | None = None) -> None:
        super().__init__(reason.value)
        self.reason, self.size, self.mode, self.uid = reason, size, mode, uid
        self.expected, self.limit = expected, limit


class Opened(NamedTuple):
    """An open, checked descriptor and the size it had when checked. A tuple, so ``fd, size = open_checked(...)``
    unpacks like the pairs a caller keeps while the reads run elsewhere (the golden bundle's thread)."""

    fd: int
    size: int


def open_checked(path: str | os.PathLike[str], *, follow_links: bool = False, owners: Collection[int] | None = None,
                 max_bytes: int | None = None, expected_bytes: int | None = None) -> Opened:
    """``path`` opened read-only and non-blocking, then checked on the descriptor: a regular file, owned by one of
    ``owners`` (None: anyone), of exactly ``expected_bytes`` and at most ``max_bytes`` (None: any). Nothing is read.

    A symbolic link is refused unless ``follow_links`` (O_NOFOLLOW: the check and the open are one step; on Windows,
    which lacks it, the link is looked for just before). :class:`ReadRefused` when refused, with the descriptor
    closed; FileNotFoundError and other OSError (ValueError for a NUL in the name) pass through for the caller."""
    if not follow_links and not _NOFOLLOW and os.path.islink(path):
        raise ReadRefused(Refusal.LINK)
    try:
        fd = os.open(path, _FLAGS | (0 if follow_links else _NOFOLLOW))
    except FileNotFoundError:
        raise
    except OSError:
        # O_NOFOLLOW's error differs by system (ELOOP on Linux, EMLINK on FreeBSD): ask whether the name is a link
        if not follow_links and os.path.islink(path):
            raise ReadRefused(Refusal.LINK) from None
        raise
    try:
        info = os.fstat(fd)
        reason = _refusal(info, owners, max_bytes, expected_bytes)
        if reason is not None:
            raise ReadRefused(reason, size=info.st_size, mode=info.st_mode, uid=info.st_uid, expected=expected_bytes,
                              limit=max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return Opened(fd, info.st_size)


def _refusal(info: os.stat_result, owners: Collection[int] | None, max_bytes: int | None,
             expected_bytes: int | None) -> Refusal | None:
    # The kind first: a FIFO's or a folder's size means nothing. The expected size before the limit: "truncated or
    # replaced" says more than "too large" about a file whose size was recorded.
    if not stat.S_ISREG(info.st_mode):
        return Refusal.NOT_REGULAR
    if owners is not None and info.st_uid not in owners:
        return Refusal.OWNER
    if expected_bytes is not None and info.st_size != expected_bytes:
        return Refusal.SIZE
    if max_bytes is not None and info.st_size > max_bytes:
        return Refusal.TOO_LARGE
    return None


def read_exact(fd: int, size: int) -> bytearray:
    """Exactly ``size`` bytes of the open descriptor ``fd`` (from its start; it is closed), read straight into one
    bytearray: no copy and no per-block allocation, so the caller's arrays can be views of it (writable).

    The buffer has room for one byte more, so a file that grew since its size was taken fills it in the same reads
    (no extra read to probe for more): :class:`ReadRefused` GREW; one that ends short is SHRANK (``size``: the bytes
    read, ``expected``: ``size``). OSError from the reads passes through."""
    data = bytearray(size + 1)
    _fill(fd, size, data)
    del data[size:]  # the spare byte: shrinking a bytearray in place copies nothing
    return data


def read_exact_unfilled(fd: int, size: int) -> memoryview:
    """:func:`read_exact` into a numpy buffer, as a writable memoryview of exactly ``size`` bytes.

    For large files read beside other work (the golden bundle's samples, on a thread while a night's first requests
    go out): ``bytearray(n)`` zero-fills its memory holding the GIL (9 ms for 12 MB, stalling every other thread);
    numpy's buffer is not filled, and its pages are first touched by the read, which runs without the GIL."""
    import numpy as np  # here, not at the top: see the module's docstring

    buffer = np.empty(size + 1, dtype=np.uint8)
    _fill(fd, size, buffer)
    return memoryview(buffer)[:size]  # type: ignore[arg-type]  # numpy arrays are buffers


def _fill(fd: int, size: int, buffer: Any) -> None:
    """Read ``fd`` (closed after) into ``buffer`` (``size`` + 1 bytes); ReadRefused unless exactly ``size`` came."""
    view = memoryview(buffer)
    filled = 0
    try:
        raw = open(fd, "rb", buffering=0, closefd=True)  # noqa: SIM115 - closed by the with below
    except BaseException:
        os.close(fd)
        view.release()
        raise
    try:
        with raw:
            while filled <= size:
                count = raw.readinto(view[filled:])  # unbuffered: one read(2) into the buffer, no copy
                if not count:
                    break
                filled += count
    finally:
        view.release()  # before a caller resizes the buffer, which a live view would forbid
    if filled != size:
        raise ReadRefused(Refusal.GREW if filled > size else Refusal.SHRANK, size=filled, expected=size)


def read_checked(path: str | os.PathLike[str], *, follow_links: bool = False, owners: Collection[int] | None = None,
                 max_bytes: int | None = None, expected_bytes: int | None = None) -> bytearray:
    """:func:`open_checked` then :func:`read_exact`: the file's bytes, exactly as large as the descriptor said."""
    fd, size = open_checked(path, follow_links=follow_links, owners=owners, max_bytes=max_bytes,
                            expected_bytes=expected_bytes)
    return read_exact(fd, size)
