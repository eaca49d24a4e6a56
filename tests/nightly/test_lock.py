"""Two nightly runs on one history: the lock keeps them apart, the history stays valid."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gapcheck.cli.app import main
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
