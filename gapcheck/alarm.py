"""One interval-timer context manager: raise an exception in a block that runs too long (POSIX signals).

The data readers bound one sample's decoding by wall time (``ITIMER_REAL``); lint bounds one file's analysis by the
process's CPU time (``ITIMER_PROF``, so a loaded machine does not turn into reported files). Both need the same care:
only where a timer can be armed (POSIX, the main thread, no other timer of that kind running, e.g. a profiler's),
and the previous handler and a disarmed timer restored whatever the block does. Imports nothing heavy.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["interval_alarm"]


@contextmanager
def interval_alarm(seconds: float, expired: Callable[[], BaseException], *, cpu: bool = False) -> Iterator[None]:
    """Raise ``expired()`` inside the block after ``seconds`` of wall time (or of this process's CPU time with
    ``cpu``); where no timer can be armed the block runs without one."""
    which, signum = (signal.ITIMER_PROF, signal.SIGPROF) if cpu else (signal.ITIMER_REAL, signal.SIGALRM)
    usable = (seconds > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
              and signal.getitimer(which) == (0.0, 0.0))
    if not usable:
        yield
        return

    def fire(number: int, frame: Any) -> None:
        raise expired()

    previous = signal.signal(signum, fire)
    signal.setitimer(which, seconds)
    try:
        yield
    finally:
        signal.setitimer(which, 0)
        signal.signal(signum, previous)
