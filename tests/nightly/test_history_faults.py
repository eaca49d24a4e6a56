"""A damaged history is exit 2 in one line; a history another SQLite writer holds is exit 3 after --lock-wait
(issue 23, items 11 and 12)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import GapcheckError
from gapcheck.nightly.history import SCHEMA_VERSION, EndpointRecord, History, HistoryBusy, HistoryCorrupt, OutputRecord


def _history_with_one_run(path: Path) -> None:
    with History(path) as h:
        h.start_run("r1", "2026-01-01T00:00:00+00:00", "g", "abc", "0")
        h.add_endpoint_result(EndpointRecord(
            "r1", "prod", "grpc://h:1", "m", None, "1", "c", "abc", "pass", "pass", "ok", None, 4,
            "2026-01-01T00:00:00+00:00", 1.0, {"total": 1.0},
            (OutputRecord("y", "pass", 0.1, 0.1, 0.1, 0.0, 0.5, 1e-4, 1e-4, ({"sample": 0},)),)))


def _one_line_error(capsys: pytest.CaptureFixture) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1, err
    return err[0]


def test_a_history_without_its_tables_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "h.sqlite"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # stamped as current, holds nothing
    db.close()
    assert main(["history", "--history", str(path)]) == 2
    assert "table(s) runs, endpoint_results, output_results, alerts missing" in _one_line_error(capsys)
    with pytest.raises(HistoryCorrupt):
        History(path)  # a nightly run refuses it too, before it records anything


@pytest.mark.parametrize("column,value", [("worst_samples", "{not json"), ("worst_samples", '"a string"'),
                                          ("max_abs_error", "'a text'"), ("timings", "[1, 2]")])
def test_a_row_that_does_not_read_back_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, column: str,
                                                 value: str) -> None:
    path = tmp_path / "h.sqlite"
    _history_with_one_run(path)
    db = sqlite3.connect(path)
    table = "endpoint_results" if column == "timings" else "output_results"
    literal = value if value.startswith("'") else "'" + value.replace("'", "''") + "'"
    db.execute(f"UPDATE {table} SET {column} = {literal}")
    db.commit()
    db.close()
    assert main(["history", "--history", str(path)]) == 2
    assert f"history {path} is damaged" in _one_line_error(capsys)
    assert main(["history", "--history", str(path), "--json", "-"]) == 2


def test_another_sqlite_writer_holding_the_history_is_exit_3_after_the_lock_wait(
        tiny_golden: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from gapcheck.golden import load_bundle
    from tests.nightly.fake_triton import FakeTriton

    path = tmp_path / "h.sqlite"
    _history_with_one_run(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # a backup script, a sqlite3 shell: another writer
    try:
        with FakeTriton(load_bundle(tiny_golden), "ok") as fake:
            code = main(["nightly", "--golden", str(tiny_golden), "--history", str(path), "--no-audit",
                         "--retries", "0", "--lock-wait", "0.5", "--endpoint", f"prod={fake.url}"])
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert code == 3
    line = _one_line_error(capsys)
    assert "locked by another SQLite writer" in line and "0.5s (--lock-wait)" in line


def test_a_rollback_journal_history_held_exclusively_is_exit_3_not_2(tmp_path: Path) -> None:
    """Before the history is WAL (a file made by another tool, a v1 history to migrate), the switch to WAL waits
    for the other writer: past the wait it is a busy history (3), not an unusable one (2)."""
    path = tmp_path / "h.sqlite"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(HistoryBusy, match="locked by another SQLite writer"):
            History(path, busy_timeout_s=0.2)
        with pytest.raises(HistoryBusy):
            History(path, readonly=True, busy_timeout_s=0.2)
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_the_busy_wait_is_the_held_nightly_lock_wait(tmp_path: Path) -> None:
    from gapcheck.nightly.lock import MIN_BUSY_WAIT_S, HistoryLock

    path = tmp_path / "h.sqlite"
    with HistoryLock(path, 2.5), History(path) as h:
        assert h.busy_timeout_s == 2.5
    with HistoryLock(path, 0.0), History(path) as h:
        assert h.busy_timeout_s == MIN_BUSY_WAIT_S
    with History(path) as h:
        assert h.busy_timeout_s == 60.0  # no lock held: a writer's own default


@pytest.mark.parametrize("wait", [float("nan"), float("inf"), -1.0])
def test_a_lock_wait_that_is_no_bound_is_refused(tmp_path: Path, wait: float) -> None:
    from gapcheck.nightly.lock import HistoryLock

    with pytest.raises(GapcheckError, match="finite number of seconds"):
        HistoryLock(tmp_path / "h.sqlite", wait)
    with pytest.raises(GapcheckError, match="finite number of seconds"):
        History(tmp_path / "h.sqlite", busy_timeout_s=wait)


def test_another_programs_database_is_left_as_it_is(tiny_golden: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    """A mistyped --history (or a link planted in its place) naming another program's SQLite file: exit 2, untouched."""
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.execute("INSERT INTO users VALUES ('ada')")
    db.commit()
    db.close()
    before = path.read_bytes()
    with pytest.raises(GapcheckError, match="an SQLite database of something else"):
        History(path)
    assert path.read_bytes() == before
    link = tmp_path / "h.sqlite"
    link.symlink_to(path)
    assert main(["nightly", "--golden", str(tiny_golden), "--history", str(link), "--retries", "0", "--no-audit",
                 "--endpoint", "e=http://127.0.0.1:1/m"]) == 2
    assert "an SQLite database of something else" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_the_busy_hint_names_the_option_each_command_has(tmp_path: Path) -> None:
    """Both commands bound the wait with --lock-wait: the line says which wait ran out, the hint is worded per command
    (a reader is run again, a night retried) (issue 23 atk5 #9, item 12)."""
    path = tmp_path / "h.sqlite"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(HistoryBusy) as reader:
            History(path, readonly=True, busy_timeout_s=0.2)
        with pytest.raises(HistoryBusy) as writer:
            History(path, busy_timeout_s=0.2)
    finally:
        other.execute("ROLLBACK")
        other.close()
    for busy in (reader.value, writer.value):
        assert busy.message.endswith("gave up after waiting 0.2s (--lock-wait)") and "--lock-wait" in busy.hint
    assert "run gapcheck history again" in reader.value.hint and "retried" in writer.value.hint


class _HeldExclusively:
    """Another SQLite connection (a sqlite3 shell, a backup script) holding a WAL history so that readers wait too:
    exclusive locking mode and a write in progress."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)

    def __enter__(self) -> "_HeldExclusively":
        self.db.execute("PRAGMA locking_mode = EXCLUSIVE")
        self.db.execute("BEGIN EXCLUSIVE")
        self.db.execute("UPDATE runs SET exit_code = 0")
        return self

    def __exit__(self, *exc: object) -> None:
        self.db.execute("ROLLBACK")
        self.db.close()


@pytest.mark.parametrize(("argv", "said"), [(["--lock-wait", "0.2"], "0.2s"), ([], "0.3s")])
def test_history_held_by_another_writer_is_exit_3_after_its_lock_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture, argv, said) -> None:
    """`gapcheck history` on a history another SQLite connection holds: exit 3 (transient: run it again) after
    --lock-wait, else [nightly] read_lock_wait_s (here 0.3), else 10 s; one line naming --lock-wait (item 12)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gapcheck.toml").write_text("[nightly]\nread_lock_wait_s = 0.3\n")
    path = tmp_path / "h.sqlite"
    _history_with_one_run(path)
    assert main(["history", "--history", str(path), "--json", "-"]) == 0
    capsys.readouterr()
    with _HeldExclusively(path):
        code = main(["history", "--history", str(path), *argv])
    assert code == 3
    line = _one_line_error(capsys)
    assert "locked by another SQLite writer" in line and f"gave up after waiting {said} (--lock-wait)" in line
    assert main(["history", "--history", str(path), "--json", "-"]) == 0  # once it is released


@pytest.mark.parametrize("command", [["history"], ["nightly", "--golden", "g", "--endpoint", "a=grpc://h:1/m"]])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e309"])
def test_a_lock_wait_that_is_no_bound_is_exit_2_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture, command, value) -> None:
    """nan would never end a wait, inf and 1e309 (read as inf) are none, -1 is no wait: on the command line, in the
    environment and in the config file, for both commands (items 4 and 12)."""
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--history", str(tmp_path / "h.sqlite"), "--lock-wait", value]) == 2
    assert "--lock-wait must be" in capsys.readouterr().err
    key = "READ_LOCK_WAIT_S" if command == ["history"] else "LOCK_WAIT_S"
    monkeypatch.setenv(f"GAPCHECK_NIGHTLY__{key}", value)
    assert main([*command, "--history", str(tmp_path / "h.sqlite")]) == 2
    assert f"GAPCHECK_NIGHTLY__{key}" in capsys.readouterr().err
    monkeypatch.delenv(f"GAPCHECK_NIGHTLY__{key}")
    (tmp_path / "gapcheck.toml").write_text(f"[nightly]\n{key.lower()} = {value if value != 'nan' else 'nan'}\n")
    assert main([*command, "--history", str(tmp_path / "h.sqlite")]) == 2
    assert f"nightly.{key.lower()}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gapcheck.toml"]  # nothing made
