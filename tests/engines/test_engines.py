from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gapcheck.engines import EngineKind, Shard, make_engine, open_engine, run_job
from gapcheck.errors import UsageError
from tests.engines import tasks

RANGES = [(i * 100, (i + 1) * 100) for i in range(12)]
EXPECTED = sum(i * i for i in range(1200))


def _shards(payloads):
    return [Shard(index=i, payload=p, items=(f"rows {p[-2]}-{p[-1]}",)) for i, p in enumerate(payloads)]


@pytest.mark.parametrize("kind", [EngineKind.serial, EngineKind.local])
def test_every_engine_merges_all_shards(kind):
    with open_engine(kind, workers=2) if kind is EngineKind.local else open_engine(kind) as engine:
        run = run_job(engine, tasks.square_sum, _shards(RANGES), empty=int, merge=tasks.add)
    assert run.merged == EXPECTED and run.failures == () and run.shards == 12 and run.engine == kind.value


def test_local_worker_killed_mid_shard_is_retried(tmp_path):
    payloads = [(str(tmp_path), 500, a, b) for a, b in RANGES]
    with open_engine("local", workers=2) as engine:
        run = run_job(engine, tasks.kill_once, _shards(payloads), empty=int, merge=tasks.add)
    assert (tmp_path / "killed-500").exists(), "the worker was not killed"
    assert run.failures == () and run.merged == EXPECTED


def test_local_shard_that_keeps_killing_its_worker_is_reported_with_its_items():
    payloads = [(300, a, b) for a, b in RANGES]
    with open_engine("local", workers=2, max_attempts=2) as engine:
        run = run_job(engine, tasks.kill_always, _shards(payloads), empty=int, merge=tasks.add)
    assert [(f.index, f.items, f.attempts) for f in run.failures] == [(3, ("rows 300-400",), 2)]
    assert "died" in run.failures[0].error
    assert run.merged == EXPECTED - sum(i * i for i in range(300, 400))  # every other shard still merged


@pytest.mark.parametrize("kind", ["serial", "local"])
def test_raising_shard_is_reported_after_retries(kind):
    payloads = [(700, a, b) for a, b in RANGES]
    with open_engine(kind, max_attempts=2) as engine:
        run = run_job(engine, tasks.raise_on, _shards(payloads), empty=int, merge=tasks.add)
    assert len(run.failures) == 1 and run.failures[0].error == "ValueError: bad rows 700-800"
    assert run.failures[0].attempts == 2


def test_interrupt_shuts_local_workers_down(tmp_path):
    """Ctrl-C (KeyboardInterrupt raised in the driver while it waits for shards) leaves no worker behind."""
    def interrupt_when_busy(signum, frame):
        if len(list(tmp_path.iterdir())) >= 2:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt_when_busy)
    signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt), open_engine("local", workers=2) as engine:
            list(engine.map_shards(tasks.slow, [Shard(i, (str(tmp_path), i)) for i in range(4)]))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 25, "close() waited for the shards instead of stopping the workers"
    pids = [int(p.name) for p in tmp_path.iterdir()]
    assert len(pids) >= 2
    for pid in pids:
        assert not _alive(pid), f"worker {pid} outlived close()"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_ray_engine_without_ray_is_a_usage_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UsageError, match=r"pip install gapcheck\[ray\]"):
        make_engine("ray")


def test_unknown_engine_and_address_without_ray_are_usage_errors():
    with pytest.raises(UsageError, match="unknown engine"):
        make_engine("spark")
    with pytest.raises(UsageError, match="only used by the ray engine"):
        make_engine("local", address="ray://head:10001")


@pytest.mark.slow
def test_ray_engine_merges_and_reports_failures():
    pytest.importorskip("ray")
    with open_engine("ray", workers=2, max_attempts=2) as engine:
        run = run_job(engine, tasks.raise_on, _shards([(700, a, b) for a, b in RANGES]), empty=int, merge=tasks.add)
        assert run.merged == EXPECTED - sum(i * i for i in range(700, 800))
        assert [f.index for f in run.failures] == [7] and "bad rows 700-800" in run.failures[0].error
        with pytest.raises(UsageError, match="no column 'typo'"):
            run_job(engine, tasks.usage_error_on, _shards([(200, a, b) for a, b in RANGES]), empty=int, merge=tasks.add)


@pytest.mark.slow
def test_ray_worker_killed_mid_shard_is_retried(tmp_path):
    pytest.importorskip("ray")
    payloads = [(str(tmp_path), 500, a, b) for a, b in RANGES]
    with open_engine("ray", workers=2) as engine:
        run = run_job(engine, tasks.kill_once, _shards(payloads), empty=int, merge=tasks.add)
    assert (tmp_path / "killed-500").exists(), "the worker was not killed"
    assert run.failures == () and run.merged == EXPECTED


@pytest.mark.parametrize("kind", ["serial", "local"])
def test_a_usage_error_in_a_task_is_raised_at_once_not_retried(kind):
    payloads = [(200, a, b) for a, b in RANGES]
    opened = open_engine(kind, workers=2) if kind == "local" else open_engine(kind)
    with opened as engine, pytest.raises(UsageError, match="no column 'typo' in rows 200-300"):
        run_job(engine, tasks.usage_error_on, _shards(payloads), empty=int, merge=tasks.add)


@pytest.mark.slow
def test_interrupt_cancels_ray_tasks(tmp_path):
    pytest.importorskip("ray")

    def interrupt_when_busy(signum, frame):
        if len(list(tmp_path.iterdir())) >= 2:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt_when_busy)
    try:
        with open_engine("ray", workers=2) as engine:
            signal.setitimer(signal.ITIMER_REAL, 0.2, 0.2)
            started = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                list(engine.map_shards(tasks.slow, [Shard(i, (str(tmp_path), i)) for i in range(4)]))
            signal.setitimer(signal.ITIMER_REAL, 0)
            assert time.monotonic() - started < 25, "the driver waited for the tasks instead of cancelling them"
            deadline = time.monotonic() + 20
            pids = [int(p.name) for p in tmp_path.iterdir()]
            while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not any(_alive(pid) for pid in pids), "a cancelled task's worker is still running"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_local_worker_killed_while_idle_does_not_break_the_next_job():
    with open_engine("local", workers=2) as engine:
        assert run_job(engine, tasks.square_sum, _shards(RANGES), empty=int, merge=tasks.add).merged == EXPECTED
        victim = next(iter(engine._pool._processes.values()))  # an idle worker, e.g. taken by the OOM killer
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        run = run_job(engine, tasks.square_sum, _shards(RANGES), empty=int, merge=tasks.add)
    assert run.failures == () and run.merged == EXPECTED


def test_local_engine_refuses_worker_counts_that_cannot_be_meant():
    from gapcheck.engines.local import LocalEngine, max_workers
    from gapcheck.errors import UsageError

    for workers in (0, -3, max_workers() + 1, 100_000):
        with pytest.raises(UsageError, match="workers"):
            LocalEngine(workers=workers)
    assert LocalEngine(workers=2).workers == 2
