"""Module-level shard tasks for the engine tests (workers import them by name)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def square_sum(payload: tuple[int, int]) -> int:
    start, stop = payload
    return sum(i * i for i in range(start, stop))


def kill_once(payload: tuple[str, int, int, int]) -> int:
    """Dies (SIGKILL on its own worker process) the first time it runs shard ``target``."""
    marker_dir, target, start, stop = payload
    marker = Path(marker_dir) / f"killed-{start}"
    if start == target and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return square_sum((start, stop))


def kill_always(payload: tuple[int, int, int]) -> int:
    target, start, stop = payload
    if start == target:
        os.kill(os.getpid(), signal.SIGKILL)
    return square_sum((start, stop))


def raise_on(payload: tuple[int, int, int]) -> int:
    target, start, stop = payload
    if start == target:
        raise ValueError(f"bad rows {start}-{stop}")
    return square_sum((start, stop))


def slow(payload: tuple[str, int]) -> int:
    pid_dir, index = payload
    Path(pid_dir, f"{os.getpid()}").write_text("")
    time.sleep(30)
    return index


def add(a: int, b: int) -> int:
    return a + b


def usage_error_on(payload: tuple[int, int, int]) -> int:
    from gapcheck.errors import UsageError

    target, start, stop = payload
    if start == target:
        raise UsageError(f"no column 'typo' in rows {start}-{stop}")
    return square_sum((start, stop))
