"""The SQLite history: WAL, versioned schema with migrations, one transaction per endpoint result."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gapcheck.errors import ConfigError
from gapcheck.nightly.history import MIGRATIONS, SCHEMA_VERSION, EndpointRecord, History, OutputRecord, records_json


def record(run: str, status: str = "pass") -> EndpointRecord:
    return EndpointRecord(run, "prod", "grpc://h:1/m", "m", None, "1", "c" * 64, "g" * 64, status, "pass", "ok", None,
                          8, f"2026-01-0{run[-1]}T00:00:00", 0.5, {"total": 0.5},
                          (OutputRecord("y", "pass", 1e-6, 1e-5, 1e-7, 0.0, 0.01, 1e-4, 1e-4,
                                        ({"sample": 3, "max_abs_error": 1e-6},), 0.0),))


def test_new_history_is_wal_and_current(tmp_path: Path) -> None:
    with History(tmp_path / "h.sqlite") as h:
        assert h.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert h.schema_version == SCHEMA_VERSION == len(MIGRATIONS)


def test_a_v1_history_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
    db.execute("INSERT INTO runs VALUES ('r1', '2026-01-01', NULL, 'g', 'gh', '0.0', 0)")
    db.execute("INSERT INTO endpoint_results (run_id, endpoint, url, model, golden_hash, status, verdict, headline, "
               "samples, started_at, seconds, timings) VALUES ('r1', 'prod', 'u', 'm', 'gh', 'pass', 'pass', '', 4, "
               "'2026-01-01', 1.0, '{}')")
    db.commit()
    db.close()
    with History(path) as h:
        assert h.schema_version == SCHEMA_VERSION == 3
        [old] = h.endpoint_history("prod")
        assert old.status == "pass" and old.outputs == ()
        assert old.precision == "fp32"  # nights before v3 were all compared in FP32
        assert h.alerts() == []


def test_a_newer_history_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(ConfigError, match="newer"):
        History(path)


def test_not_a_database_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match="not a usable SQLite"):
        History(path)


def test_a_crash_mid_endpoint_leaves_nothing_half_written(tmp_path: Path) -> None:
    with History(tmp_path / "h.sqlite") as h:
        h.start_run("r1", "2026-01-01", "g", "g" * 64, "0")
        h.add_endpoint_result(record("r1"))
        bad = record("r2")
        bad = EndpointRecord(**{**bad.__dict__, "outputs": (OutputRecord("y", "pass", None, None, None, None, None,
                                                                        None, None),)})  # atol NULL violates NOT NULL
        h.start_run("r2", "2026-01-02", "g", "g" * 64, "0")
        with pytest.raises(sqlite3.IntegrityError):
            h.add_endpoint_result(bad)
        assert [r.run_id for r in h.endpoint_history("prod")] == ["r1"]
        assert h.db.execute("SELECT COUNT(*) FROM output_results").fetchone()[0] == 1
        assert h.integrity_ok()


def test_records_read_back_and_as_json(tmp_path: Path) -> None:
    with History(tmp_path / "h.sqlite") as h:
        for run in ("r1", "r2", "r3"):
            h.start_run(run, f"2026-01-0{run[-1]}", "g", "g" * 64, "0")
            h.add_endpoint_result(record(run))
        assert [r.run_id for r in h.endpoint_history("prod", 2)] == ["r2", "r3"]
        [one] = records_json(h.recent(last=1))
    assert one["run_id"] == "r3" and one["max_abs_error"] == 1e-6 and one["outputs"][0]["cusum"] == 0.0
    with History(tmp_path / "h.sqlite", readonly=True) as reader:
        assert len(reader.recent()) == 3


def test_readonly_needs_an_existing_history(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        History(tmp_path / "missing.sqlite", readonly=True)


def test_readers_are_not_blocked_by_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    with History(path) as writer:
        writer.start_run("r1", "2026-01-01", "g", "g" * 64, "0")
        writer.add_endpoint_result(record("r1"))
        with writer.transaction():  # a night in the middle of writing its next endpoint
            writer.db.execute("INSERT INTO runs (run_id, started_at, golden_path, golden_hash, gapcheck_version) "
                              "VALUES ('r2', '2026-01-02', 'g', 'h', '0')")
            with History(path, readonly=True) as reader:
                assert [r.run_id for r in reader.recent()] == ["r1"] and reader.run_ids() == ["r1"]


def test_a_disk_filling_up_mid_run_is_exit_3_and_leaves_every_recorded_endpoint_whole(
        tiny_golden: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    """SQLite's page limit stands in for the disk: it fails writes exactly as a full disk does (SQLITE_FULL)."""
    from gapcheck.cli.app import main
    from gapcheck.golden import load_bundle
    from tests.nightly.fake_triton import FakeTriton

    real_start = History.start_run

    def start_then_fill(self: History, *args, **kwargs) -> None:
        real_start(self, *args, **kwargs)
        pages = self.db.execute("PRAGMA page_count").fetchone()[0]
        self.db.execute(f"PRAGMA max_page_count = {pages}")  # no page may be added from here on

    monkeypatch.setattr(History, "start_run", start_then_fill)
    history = tmp_path / "h.sqlite"
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        endpoints = [a for n in range(40) for a in ("--endpoint", f"ep{n:02d}={fake.url}")]
        code = main(["nightly", "--golden", str(tiny_golden), "--history", str(history), "--no-audit",
                     "--retries", "0", *endpoints])
    err = capsys.readouterr().err
    assert code == 3
    assert f"history {history} could not be written" in err and "full" in err
    monkeypatch.undo()
    with History(history) as h:
        assert h.integrity_ok()
        [run] = h.db.execute("SELECT finished_at, exit_code FROM runs").fetchall()
        assert tuple(run) == (None, None)  # visibly incomplete
        recorded = [e for e in h.endpoints()]
        assert 0 < len(recorded) < 40
        for name in recorded:  # every endpoint recorded so far has its output rows: nothing half-written
            [record] = h.endpoint_history(name)
            assert record.status == "pass" and len(record.outputs) == 1


def test_a_history_or_lock_that_cannot_be_created_is_a_config_error(tiny_golden: Path, tmp_path: Path,
                                                                     capsys) -> None:
    from gapcheck.cli.app import main

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    code = main(["nightly", "--golden", str(tiny_golden), "--history", str(not_a_folder / "h.sqlite"),
                 "--endpoint", "ep=http://127.0.0.1:1/m"])
    assert code == 2
    assert "cannot be opened" in capsys.readouterr().err


def test_a_link_planted_as_the_lock_file_is_not_followed(tmp_path: Path) -> None:
    from gapcheck.errors import ConfigError
    from gapcheck.nightly.lock import HistoryLock

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "h.sqlite.lock").symlink_to(victim)
    with pytest.raises(ConfigError, match="lock file"):
        HistoryLock(tmp_path / "h.sqlite", wait_s=0).acquire()
    assert victim.read_text() == "precious"


def test_history_of_an_unknown_endpoint_is_a_usage_error_not_a_pass(tmp_path: Path, capsys) -> None:
    from gapcheck.cli.app import main

    path = tmp_path / "odd #name?.sqlite"  # URI characters in the path: read-only opening still finds the file
    with History(path) as h:
        h.start_run("r1", "2026-01-01", "g", "g" * 64, "0")
        h.add_endpoint_result(record("r1"))
    assert main(["history", "--history", str(path), "--endpoint", "prod"]) == 0
    capsys.readouterr()
    assert main(["history", "--history", str(path), "--endpoint", "prd\x1b[31m"]) == 2
    err = capsys.readouterr().err
    assert "no endpoint" in err and "prod" in err and "\x1b" not in err


def test_a_history_closed_behind_is_readable_at_once_and_checkpointed_after(tmp_path: Path) -> None:
    """closed_behind: the night is committed before the block ends, so a reader (or the next run) sees it while the
    WAL checkpoint still runs on the closing thread; once closed, the WAL is folded into the file and removed."""
    from gapcheck.nightly.history import closed_behind, wait_for_closes

    path = tmp_path / "h.sqlite"
    with closed_behind(History(path)) as h:
        h.start_run("r1", "2026-01-01", "g", "g" * 64, "0")
        h.add_endpoint_result(record("r1"))
    with History(path, readonly=True) as reader:
        assert [r.run_id for r in reader.recent()] == ["r1"]
    with History(path) as writer:  # the next night's writer is not refused while the first closes
        writer.start_run("r2", "2026-01-02", "g", "g" * 64, "0")
    wait_for_closes()
    assert not (tmp_path / "h.sqlite-wal").exists()
    with History(path, readonly=True) as reader:
        assert reader.run_ids() == ["r1", "r2"] and reader.integrity_ok()


def test_the_interpreter_waits_at_exit_for_a_history_closed_behind(tmp_path: Path) -> None:
    """The closing thread is started without waiting for it (no join by the interpreter): an atexit hook waits for
    the close, so a process that ends right after its night still leaves the history checkpointed."""
    import subprocess
    import sys

    path = tmp_path / "h.sqlite"
    script = (
        "import sys, time\n"
        "from gapcheck.nightly.history import History, closed_behind\n"
        "from gapcheck.nightly import history as module\n"
        "real = History._close_quietly\n"
        "def slow(self, closed):\n"
        "    time.sleep(0.3)  # a close that is still running when the main thread ends\n"
        "    real(self, closed)\n"
        "History._close_quietly = slow\n"
        f"with closed_behind(History({str(path)!r})) as h:\n"
        "    h.start_run('r1', '2026-01-01', 'g', 'g' * 64, '0')\n"
        "print('pending', sum(not e.is_set() for e in module._CLOSING))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert "pending 1" in done.stdout  # the main thread ended while the close still ran
    assert not (tmp_path / "h.sqlite-wal").exists()  # ...and the process waited for it: checkpointed, removed
    with History(path, readonly=True) as reader:
        assert reader.run_ids() == ["r1"] and reader.integrity_ok()


def test_a_failing_block_closes_its_history_at_once(tmp_path: Path) -> None:
    from gapcheck.nightly.history import closed_behind

    path = tmp_path / "h.sqlite"
    history = History(path)
    with pytest.raises(RuntimeError), closed_behind(history):
        raise RuntimeError("an endpoint crashed the run")
    with pytest.raises(sqlite3.ProgrammingError):  # closed here, not on a thread
        history.db.execute("SELECT 1")


def test_a_night_whose_first_check_finds_the_bundle_bad_leaves_no_run_row(tiny_golden: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The history is opened and the run row written on a thread once the hashes pass, beside the first requests;
    when the first endpoint's check then finds the bundle bad anyway (its ONNX export unreadable: exit 2), that run
    row is taken back before the error leaves run_nightly."""
    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly import run as nightly_run
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.probe import BadBundle, verified

    def finds_it_bad(spec, bundle, request, cancelled=None):
        verified(bundle)  # the hashes pass: the opening thread goes on and starts the run
        raise BadBundle("golden bundle: model.onnx is not a valid ONNX model")

    monkeypatch.setattr(nightly_run, "_check", finds_it_bad)
    history = tmp_path / "h.sqlite"
    spec = endpoint_spec(parse_endpoint_option("prod=grpc://127.0.0.1:1/m"))
    with pytest.raises(BadBundle):
        run_nightly(NightlyRequest(golden=tiny_golden, endpoints=(spec,), history=history))
    assert history.exists()  # opened beside the first requests (the hashes passed) ...
    with History(history, readonly=True) as h:
        assert h.run_ids() == []  # ... and the run taken back


def test_the_first_endpoints_earlier_nights_are_read_beside_its_requests_once(tiny_golden: Path, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23 item 14: the first endpoint's earlier nights are read on the thread that opens the history (while its
    requests are in flight), not after its check; every endpoint's are read once, and its report is built on them
    (night 2 knows night 1: its last pass and a trend of two nights)."""
    import threading

    from gapcheck.golden import load_bundle
    from gapcheck.nightly import NightlyRequest, run_nightly
    from gapcheck.nightly.config import endpoint_spec, parse_endpoint_option
    from gapcheck.nightly.history import wait_for_closes
    from tests.nightly.fake_triton import FakeTriton

    history = tmp_path / "h.sqlite"
    with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
        specs = tuple(endpoint_spec(parse_endpoint_option(f"{name}={fake.url}")) for name in ("first", "second"))
        request = NightlyRequest(tiny_golden, specs, history, audit=False)
        night1 = run_nightly(request)
        reads: list[tuple[str, bool]] = []
        real = History.endpoint_history

        def counted(self: History, endpoint: str, *args, **kwargs):
            reads.append((endpoint, threading.current_thread() is threading.main_thread()))
            return real(self, endpoint, *args, **kwargs)

        monkeypatch.setattr(History, "endpoint_history", counted)
        night2 = run_nightly(request)
    wait_for_closes()
    assert reads == [("first", False), ("second", True)]
    for before, report in zip(night1.endpoints, night2.endpoints, strict=True):
        assert report.status.value == "pass" and report.last_pass_at == before.trend[-1][0]
        assert len(report.trend) == 2 and report.trend[0][0] == before.trend[-1][0]
