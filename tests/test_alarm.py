"""The one interval timer: raises in the block after its time, restores the handler and disarms the timer, and does
nothing where no timer can be armed (another thread)."""
from __future__ import annotations

import signal
import threading
import time

import pytest

from gapcheck.alarm import interval_alarm


class Expired(Exception):
    pass


@pytest.mark.parametrize("cpu", [False, True], ids=["wall", "cpu"])
def test_the_block_is_interrupted_and_everything_restored(cpu: bool):
    which = signal.ITIMER_PROF if cpu else signal.ITIMER_REAL
    before = signal.getsignal(signal.SIGPROF if cpu else signal.SIGALRM)
    with pytest.raises(Expired), interval_alarm(0.05, Expired, cpu=cpu):
        while True:  # spin (CPU time passes too)
            pass
    assert signal.getitimer(which) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGPROF if cpu else signal.SIGALRM) == before


def test_a_quick_block_is_not_interrupted_and_zero_means_no_timer():
    with interval_alarm(5, Expired):
        pass
    with interval_alarm(0, Expired):
        time.sleep(0.01)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_no_timer_outside_the_main_thread():
    seen: list[object] = []

    def work() -> None:
        with interval_alarm(0.01, Expired):
            time.sleep(0.05)
        seen.append("done")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == ["done"]
