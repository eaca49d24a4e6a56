"""One nightly run at a time per history: ``flock`` on a lock file next to the history database.

The second run waits up to ``wait_s`` (polling, so the wait is bounded even on filesystems where a
blocking ``flock`` could hang), then gives up with :class:`LockTimeout` (exit 3: the job did not run).
The kernel drops an flock when its process dies, so a crashed run never leaves a stale lock.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from gapcheck.errors import BackendError, ConfigError

POLL_S = 0.1


class LockTimeout(BackendError):
    """Another nightly run holds the history's lock longer than we may wait."""


def lock_path_for(history: Path) -> Path:
    return history.with_name(history.name + ".lock")


class HistoryLock:
    """Exclusive lock on ``<history>.lock``; use as a context manager."""

    def __init__(self, history: str | Path, wait_s: float = 60.0) -> None:
        self.path = lock_path_for(Path(history))
        self.wait_s = float(wait_s)
        self._fd: int | None = None
        self.waited_s = 0.0

    def acquire(self) -> "HistoryLock":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # O_NOFOLLOW: a link planted in place of the lock file must not make us create or truncate its target
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise ConfigError(f"the lock file {self.path} next to the history cannot be opened ({exc.strerror})",
                              hint="the history's folder must be a writable local folder") from None
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
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
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
