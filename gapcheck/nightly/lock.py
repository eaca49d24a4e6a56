"""One nightly run at a time per history: ``flock`` on a lock file next to the history database.

The second run waits up to ``wait_s`` (polling, so the wait is bounded even on filesystems where a
blocking ``flock`` could hang), then gives up with :class:`LockTimeout` (exit 3: the job did not run).
The kernel drops an flock when its process dies, so a crashed run never leaves a stale lock.

The same wait bounds the history's own SQLite busy wait while this process holds the lock
(:func:`held_wait_s`): a history locked by another SQLite writer (not a gapcheck run) is given up on
after ``wait_s`` too, with exit 3 — one budget, one option (``--lock-wait``).
"""
from __future__ import annotations

import fcntl
import math
import os
import stat
import threading
import time
from pathlib import Path

from gapcheck.errors import BackendError, ConfigError, UsageError

POLL_S = 0.1
_PID_WIDTH = 24  # bytes of the pid line in the lock file (a pid and newline, padded with spaces)
MIN_BUSY_WAIT_S = 0.5  # SQLite's own momentary locks (a reader's checkpoint) are waited out even at --lock-wait 0
READ_LOCK_WAIT_S = 10.0  # a reader's (gapcheck history's) default wait for another SQLite writer's lock
_HELD: dict[Path, float] = {}  # history lock file -> its wait, while this process holds it
_HELD_GUARD = threading.Lock()


class LockTimeout(BackendError):
    """Another nightly run holds the history's lock longer than we may wait."""


def check_history_path(history: str | Path) -> None:
    """A history is a regular file, or absent (created): anything else (a folder, a FIFO, a device such as
    /dev/zero, a socket, a link to nothing) is refused with ConfigError (exit 2) before the lock file, the
    database or its journal is created beside it (SQLite would fail on it later, as a disk I/O error, exit 3)."""
    path = Path(history)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.lexists(path):
            raise ConfigError(f"history {path} is a symbolic link to nothing",
                              hint="give the path of an SQLite file, or of one to create") from None
        return
    except OSError:  # its folder is missing or no folder: said where the lock file or the database is opened
        return
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else \
            "not a regular file"
        raise ConfigError(f"history {path} is {kind}, not an SQLite file",
                          hint="give the path of an SQLite file, or of one to create")


def lock_path_for(history: Path) -> Path:
    return history.with_name(history.name + ".lock")


class HistoryLock:
    """Exclusive lock on ``<history>.lock``; use as a context manager."""

    def __init__(self, history: str | Path, wait_s: float = 60.0) -> None:
        self.history = Path(history)
        self.path = lock_path_for(self.history)
        self.wait_s = float(wait_s)
        # NaN would never compare >= and the wait would never end; inf is no bound either.
        if not (math.isfinite(self.wait_s) and self.wait_s >= 0):
            raise UsageError(f"the lock wait must be a finite number of seconds >= 0, got {wait_s}")
        self._fd: int | None = None
        self.waited_s = 0.0

    def acquire(self) -> "HistoryLock":
        check_history_path(self.history)  # before the lock file (or its folder) is created
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # O_NOFOLLOW: a link planted in place of the lock file must not make us create or truncate its target
            # O_NONBLOCK: a FIFO planted there must not block the open (it is refused just below)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise ConfigError(f"the lock file {self.path} next to the history cannot be opened ({exc.strerror})",
                              hint="the history's folder must be a writable local folder") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, device or socket: pwrite fails ("Illegal seek")
            os.close(fd)
            raise ConfigError(f"the lock file {self.path} next to the history is not a regular file",
                              hint="remove it; gapcheck creates the lock file itself")
        os.set_blocking(fd, True)
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - start >= self.wait_s:
                    holder = _read_holder(fd)
                    os.close(fd)
                    raise LockTimeout(
                        f"another nightly run{holder} holds {self.path}; gave up after waiting {self.wait_s:.0f}s",
                        hint="runs overlap: make the schedule less frequent, or allow a longer lock wait") from None
                time.sleep(POLL_S)
        self.waited_s = time.monotonic() - start
        # The holder's pid, written in place over a fixed width (longer than any pid line written before): truncating
        # the file first frees and reallocates its block, a journalled change that cost ~3 ms a night here.
        os.pwrite(fd, f"{os.getpid()}\n".ljust(_PID_WIDTH).encode(), 0)
        self._fd = fd
        with _HELD_GUARD:
            _HELD[_key(self.path)] = max(self.wait_s, MIN_BUSY_WAIT_S)
        return self

    def release(self) -> None:
        if self._fd is not None:
            with _HELD_GUARD:
                _HELD.pop(_key(self.path), None)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "HistoryLock":
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


def _key(path: Path) -> Path:
    return Path(os.path.abspath(path))


def held_wait_s(history: str | Path) -> float | None:
    """The wait of the nightly lock this process holds on ``history`` (None when it holds none)."""
    with _HELD_GUARD:
        return _HELD.get(_key(lock_path_for(Path(history))))
