"""Two nightly runs on one history: the lock keeps them apart, the history stays valid."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import ConfigError
from gapcheck.nightly.history import History
from gapcheck.nightly.lock import HistoryLock, LockTimeout


def test_a_held_lock_makes_the_second_run_exit_3_after_a_bounded_wait(tiny_golden: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    history = tmp_path / "h.sqlite"
    with HistoryLock(history):
        start = time.monotonic()
        code = main(["nightly", "--golden", str(tiny_golden), "--history", str(history), "--lock-wait", "0.5",
                     "--endpoint", "prod=grpc://127.0.0.1:1/never-contacted"])
        waited = time.monotonic() - start
    assert code == 3
    assert "another nightly run" in capsys.readouterr().err
    assert waited < 30  # bounded: it gave up instead of hanging
    assert not history.exists()


def test_lock_is_exclusive_and_released() -> None:
    import tempfile

    history = Path(tempfile.mkdtemp()) / "h.sqlite"
    first = HistoryLock(history).acquire()
    with pytest.raises(LockTimeout):
        HistoryLock(history, wait_s=0.2).acquire()
    first.release()
    HistoryLock(history, wait_s=0.2).acquire().release()


def test_the_lock_names_its_holder_over_whatever_an_earlier_run_wrote(tmp_path: Path) -> None:
    """The pid is written in place (no truncation): a longer pid line left by an earlier run is fully overwritten,
    and a run that cannot take the lock names the holder."""
    history = tmp_path / "h.sqlite"
    (tmp_path / "h.sqlite.lock").write_text("4194304999\n")  # an earlier holder's (longer) pid line
    with HistoryLock(history):
        assert (tmp_path / "h.sqlite.lock").read_text().strip() == str(os.getpid())
        with pytest.raises(LockTimeout, match=rf"\(pid {os.getpid()}\)"):
            HistoryLock(history, wait_s=0.0).acquire()


def test_two_nightly_processes_started_at_once(served, tiny_golden: Path, tmp_path: Path) -> None:
    history = tmp_path / "h.sqlite"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "gapcheck", "nightly", "--golden", str(tiny_golden), "--history", str(history),
         "--lock-wait", "120", "--retries", "1", "--endpoint", f"prod={served.url('grpc', 'locking')}",
         "--json", str(tmp_path / f"{n}.json")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for n in range(2)]
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0], [p.stderr.read().decode()[-2000:] for p in procs]
    reports = [json.loads((tmp_path / f"{n}.json").read_text()) for n in range(2)]
    assert len({r["run"]["run_id"] for r in reports}) == 2
    with History(history) as h:
        assert h.integrity_ok()
        assert len(h.run_ids()) == 2
        records = h.endpoint_history("prod")
        assert [r.status for r in records] == ["pass", "pass"]
        finished = h.db.execute("SELECT COUNT(*) FROM runs WHERE finished_at IS NOT NULL AND exit_code = 0").fetchone()[0]
        assert finished == 2


CRASHING_RUN = """
import os, signal, sys
from pathlib import Path
from gapcheck.groups import TritonTarget
from gapcheck.nightly import run
from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option

calls = []
real = run.check_endpoint
def crash_on_second(spec, *args, **kwargs):
    calls.append(spec.name)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # the machine dies in the middle of the night
    return real(spec, *args, **kwargs)
run.check_endpoint = crash_on_second
golden, history, port = sys.argv[1], sys.argv[2], sys.argv[3]
specs = tuple(endpoint_spec(parse_endpoint_option(f"{n}=grpc://127.0.0.1:{port}/m")) for n in ("first", "second"))
run.run_nightly(run.NightlyRequest(golden=Path(golden), endpoints=specs, history=Path(history),
                                  target=TritonTarget(retries=0)))
"""


def test_a_crash_mid_run_leaves_the_history_consistent_and_the_lock_free(tiny_golden: Path, tmp_path: Path) -> None:
    from tests.nightly.conftest import free_port

    history = tmp_path / "h.sqlite"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", CRASHING_RUN, str(tiny_golden), str(history), str(free_port())],
                          env=env, capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    with History(history) as h:
        assert h.integrity_ok()
        [run_row] = h.db.execute("SELECT finished_at, exit_code FROM runs").fetchall()
        assert tuple(run_row) == (None, None)  # the run is visibly incomplete
        assert [r.status for r in h.endpoint_history("first")] == ["unreachable"]  # committed before the crash
        assert h.endpoint_history("second") == []  # nothing half-written
    HistoryLock(history, wait_s=0.0).acquire().release()  # the kernel dropped the dead run's lock



SERVE_FAKES = """
import sys, time
from pathlib import Path
from gapcheck.golden import load_bundle
from tests.nightly.fake_triton import FakeTriton
bundle = load_bundle(sys.argv[1])
with FakeTriton(bundle, "ok") as good, FakeTriton(bundle, "hang") as hung:
    Path(sys.argv[2]).write_text(good.url + " " + hung.url)
    time.sleep(120)
"""


def test_sigterm_mid_run_keeps_the_history_consistent_and_frees_the_lock(tiny_golden: Path, tmp_path: Path) -> None:
    """What Kubernetes does at activeDeadlineSeconds: SIGTERM while an endpoint hangs mid-answer."""
    import signal
    import time

    history = tmp_path / "h.sqlite"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    urls_file = tmp_path / "urls"
    fakes = subprocess.Popen([sys.executable, "-c", SERVE_FAKES, str(tiny_golden), str(urls_file)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not urls_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        good, hung = urls_file.read_text().split()
        run = subprocess.Popen(
            [sys.executable, "-m", "gapcheck", "nightly", "--golden", str(tiny_golden), "--history", str(history),
             "--endpoint", f"first={good}", "--endpoint", f"second={hung}", "--timeout", "60", "--retries", "0",
             "--no-audit"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while time.monotonic() < deadline:  # wait until the first endpoint is committed: the second is hanging
            time.sleep(0.2)
            if history.exists():
                try:  # read-only, as `gapcheck history` reads: never a second writer (or migrator) beside the run
                    with History(history, readonly=True) as h:
                        if h.endpoint_history("first"):
                            break
                except (ConfigError, sqlite3.Error):
                    continue  # created but not yet migrated
        time.sleep(0.5)
        run.send_signal(signal.SIGTERM)
        code = run.wait(timeout=30)
    finally:
        fakes.kill()
        fakes.wait()
    assert code != 0  # never a pass
    with History(history) as h:
        assert h.integrity_ok()
        [row] = h.db.execute("SELECT finished_at FROM runs").fetchall()
        assert row[0] is None  # visibly incomplete
        assert [r.status for r in h.endpoint_history("first")] == ["pass"]
        assert h.endpoint_history("second") == []  # nothing half-written
    HistoryLock(history, wait_s=0.0).acquire().release()  # the lock went with the process


def test_a_fifo_as_the_lock_file_is_refused_without_blocking(tiny_golden: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    """issue 23 attacker #4: `mkfifo h.sqlite.lock` made the run exit 3 with "OSError: Illegal seek"."""
    history = tmp_path / "h.sqlite"
    os.mkfifo(tmp_path / "h.sqlite.lock")
    with pytest.raises(ConfigError, match="not a regular file"):
        HistoryLock(history).acquire()
    code = main(["nightly", "--golden", str(tiny_golden), "--history", str(history), "--lock-wait", "0",
                 "--endpoint", "prod=grpc://127.0.0.1:1/never-contacted"])
    assert code == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err and "Traceback" not in err
    assert not history.exists()
