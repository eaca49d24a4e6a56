"""The run history: an embedded SQLite database (WAL mode), versioned and migrated, one transaction per endpoint.

Tables (schema version in ``PRAGMA user_version``; :data:`MIGRATIONS` brings any older file up to date):

- ``runs``: one row per nightly run (inserted at start, ``finished_at`` set at the end; a crashed run
  keeps its row without ``finished_at`` and every endpoint result it committed).
- ``endpoint_results``: one row per run and endpoint: status, verdict, precision (fp16 for an FP16 deployment), served
  version, config hash, golden bundle hash, error, timings. Written with its ``output_results`` in ONE transaction, so a
  crash leaves either the whole endpoint result or nothing.
- ``output_results``: per output: verdict, error statistics, tolerance, CUSUM statistic, worst samples.
- ``alerts``: every webhook delivery attempt (target host only, never the URL's path or a secret).

Concurrent writers are kept out by the nightly lock (:mod:`gapcheck.nightly.lock`); readers
(``gapcheck history``) can read while a run writes, which is what WAL is for.
"""
from __future__ import annotations

import _thread
import atexit
import json
import logging
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gapcheck.errors import BackendError, ConfigError, GapcheckError, UsageError
from gapcheck.nightly.lock import READ_LOCK_WAIT_S

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 3


class HistoryWriteError(BackendError):
    """The history could not be written (disk full, read-only, I/O error): the night is not recorded (exit 3)."""


class HistoryBusy(BackendError):
    """Another SQLite writer held the history longer than the bounded wait: a transient fault (exit 3, retried)."""


class HistoryCorrupt(ConfigError):
    """The history is a SQLite database but not a usable gapcheck history (tables missing, a row unreadable): exit 2."""


# SQLITE_BUSY and SQLITE_LOCKED (primary codes): another connection holds the lock we need.
_BUSY_CODES = (5, 6)
READ_BUSY_S = READ_LOCK_WAIT_S  # how long a reader waits for another writer's exclusive lock by default
_TABLES = ("runs", "endpoint_results", "output_results", "alerts")


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _BUSY_CODES
    return "locked" in str(exc) or "busy" in str(exc)


def _busy(path: Path, waited_s: float, readonly: bool = False) -> HistoryBusy:
    # Both commands bound the wait with --lock-wait (nightly: the run's lock and SQLite's; gapcheck history: SQLite's);
    # the one line says which wait ran out. Worded per command: a reader is run again, a night retried.
    then = "run gapcheck history again once it is done" if readonly else "the run can be retried"
    return HistoryBusy(f"history {path} is locked by another SQLite writer; gave up after waiting {waited_s:g}s "
                       "(--lock-wait)",
                       hint=f"another process is writing it (not a gapcheck nightly: that one holds the lock file); "
                            f"{then}, or allow a longer --lock-wait")


def _corrupt(path: Path, exc: BaseException) -> HistoryCorrupt:
    detail = " ".join(str(exc).split())[:200]
    return HistoryCorrupt(f"history {path} is damaged: {type(exc).__name__}: {detail}",
                          hint="restore it from a backup, or start a new history with another --history path")

_V1 = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    golden_path TEXT NOT NULL,
    golden_hash TEXT NOT NULL,
    gapcheck_version TEXT NOT NULL,
    exit_code INTEGER
);
CREATE TABLE endpoint_results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    endpoint TEXT NOT NULL,
    url TEXT NOT NULL,
    model TEXT NOT NULL,
    requested_version TEXT,
    served_version TEXT,
    config_hash TEXT,
    golden_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    verdict TEXT NOT NULL,
    headline TEXT NOT NULL,
    error TEXT,
    samples INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    seconds REAL NOT NULL,
    timings TEXT NOT NULL,
    UNIQUE (run_id, endpoint)
);
CREATE INDEX endpoint_results_by_endpoint ON endpoint_results (endpoint, id);
CREATE TABLE output_results (
    endpoint_result_id INTEGER NOT NULL REFERENCES endpoint_results(id),
    output TEXT NOT NULL,
    verdict TEXT NOT NULL,
    max_abs_error REAL,
    max_rel_error REAL,
    mean_abs_error REAL,
    mismatch_fraction REAL,
    error_ratio REAL,
    rtol REAL NOT NULL,
    atol REAL NOT NULL,
    worst_samples TEXT NOT NULL,
    PRIMARY KEY (endpoint_result_id, output)
);
"""

# v2: the drift statistic per output, and the alert log.
_V2 = """
ALTER TABLE output_results ADD COLUMN cusum REAL;
CREATE TABLE alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    endpoint TEXT NOT NULL,
    status TEXT NOT NULL,
    target TEXT NOT NULL,
    delivered INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    error TEXT,
    sent_at TEXT NOT NULL
);
"""

# v3: the precision each endpoint was compared in (fp16: the deployment declares FP16, its inputs were sent as FP16
# and its outputs compared with FP16 budgets); rows of earlier nights were compared in FP32.
_V3 = """
ALTER TABLE endpoint_results ADD COLUMN precision TEXT NOT NULL DEFAULT 'fp32';
"""

#: Migration i brings a database from user_version i to i + 1.
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3)


@dataclass(frozen=True)
class OutputRecord:
    output: str
    verdict: str
    max_abs_error: float | None
    max_rel_error: float | None
    mean_abs_error: float | None
    mismatch_fraction: float | None
    error_ratio: float | None
    rtol: float
    atol: float
    worst_samples: tuple[dict[str, Any], ...] = ()
    cusum: float | None = None


@dataclass(frozen=True)
class EndpointRecord:
    """One endpoint's result in one run, as stored."""

    run_id: str
    endpoint: str
    url: str
    model: str
    requested_version: str | None
    served_version: str | None
    config_hash: str | None
    golden_hash: str
    status: str
    verdict: str
    headline: str
    error: str | None
    samples: int
    started_at: str
    seconds: float
    timings: dict[str, float]
    outputs: tuple[OutputRecord, ...] = ()
    precision: str = "fp32"  # fp16: an FP16 deployment, compared with FP16 budgets


@dataclass(frozen=True)
class AlertRecord:
    run_id: str
    endpoint: str
    status: str
    target: str
    delivered: bool
    attempts: int
    error: str | None
    sent_at: str


def _number(value: Any) -> float | None:
    """A stored statistic: a number or NULL; anything else is a damaged row."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a statistic is {type(value).__name__}, not a number")
    return float(value)


def _json_list(text: Any) -> tuple[dict[str, Any], ...]:
    items = json.loads(text)
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise TypeError("worst_samples is not a list of objects")
    return tuple(items)


def _finite(value: float | None) -> float | None:
    # SQLite stores inf fine but JSON does not; keep inf (a shape mismatch) and drop NaN.
    return None if value is None or value != value else float(value)


class History(AbstractContextManager["History"]):
    """An open history database (use as a context manager: closed at the end)."""

    def __init__(self, path: str | Path, *, readonly: bool = False, busy_timeout_s: float | None = None) -> None:
        """Open (a writer creates and migrates it). ``busy_timeout_s`` bounds every wait for another SQLite
        writer's lock (default: the wait of the nightly lock held on this history by this process, else
        :data:`READ_BUSY_S` for a reader and 60 s for a writer); past it: :class:`HistoryBusy`, exit 3."""
        from gapcheck.nightly.lock import check_history_path, held_wait_s

        self.path = Path(path)
        self.readonly = readonly
        if readonly and not self.path.is_file():
            raise ConfigError(f"no history database at {self.path}")
        if not readonly:
            check_history_path(self.path)  # a folder, FIFO or device: exit 2, no journal created beside it
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"history {self.path}: its folder cannot be created ({exc.strerror})") from None
        wait = busy_timeout_s if busy_timeout_s is not None else held_wait_s(self.path)
        if wait is None:
            wait = READ_BUSY_S if readonly else 60.0
        if not (wait >= 0 and math.isfinite(wait)):
            raise UsageError(f"the history's lock wait must be a finite number of seconds >= 0, got {wait}")
        self.busy_timeout_s = float(wait)
        try:
            # quoted: a '?' or '#' in the path would otherwise start the URI's query or fragment
            uri = f"file:{quote(str(self.path))}?mode=ro" if readonly else str(self.path)
            # check_same_thread off: a nightly run hands the connection to a writer thread and back, never
            # using it from two threads at once (see run_nightly)
            self.db = sqlite3.connect(uri, uri=readonly, timeout=self.busy_timeout_s, isolation_level=None,
                                      check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA foreign_keys = ON")
            if not readonly:
                self._refuse_foreign()  # before anything is written, the journal mode included
                self.db.execute("PRAGMA journal_mode = WAL")
                self.db.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable at checkpoint, never corrupt
                self._migrate()
            else:
                self._check_readable()
            self._check_tables()
        except sqlite3.DatabaseError as exc:
            if hasattr(self, "db"):
                self.db.close()
            if _is_busy(exc):
                raise _busy(self.path, self.busy_timeout_s, self.readonly) from None
            raise ConfigError(f"history {self.path} is not a usable SQLite database: {exc}") from None
        except GapcheckError:
            if hasattr(self, "db"):
                self.db.close()
            raise

    def _refuse_foreign(self) -> None:
        """A new history is an empty file. A database of another program (a mistyped --history, a planted link)
        would otherwise be switched to WAL and get gapcheck's tables added to it."""
        if self.db.execute("PRAGMA user_version").fetchone()[0] != 0:
            return
        others = [r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 3")]
        if others:
            raise ConfigError(f"history {self.path} is an SQLite database of something else (it holds tables "
                              f"{', '.join(ascii(t) for t in others)}); gapcheck leaves it as it is",
                              hint="give --history a new file or an existing gapcheck history")

    def _known_version(self, advice: str = "") -> int:
        """The file's schema version; one newer than this gapcheck knows is refused (ConfigError, ``advice`` added)."""
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise ConfigError(f"history {self.path} has schema version {version}, newer than this gapcheck "
                              f"({SCHEMA_VERSION}){advice}")
        return version

    def _check_readable(self) -> None:
        version = self._known_version()
        if version < SCHEMA_VERSION:
            raise ConfigError(f"history {self.path} has schema version {version}; a nightly run migrates it")

    def _check_tables(self) -> None:
        """Every table the schema version promises is there (a file stamped v2 by hand has none)."""
        present = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in _TABLES if t not in present]
        if missing:
            raise HistoryCorrupt(f"history {self.path} is damaged: table(s) {', '.join(missing)} missing although "
                                 f"its schema version is {self.schema_version}",
                                 hint="restore it from a backup, or start a new history with another --history path")

    def _migrate(self) -> None:
        version = self._known_version("; upgrade gapcheck")
        for target in range(version, SCHEMA_VERSION):
            with self.transaction():
                for statement in MIGRATIONS[target].split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {target + 1}")

    def transaction(self) -> "_Transaction":
        return _Transaction(self.db, self.path, self.busy_timeout_s)

    def _rows(self, query: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """A read: another writer's lock past the wait is HistoryBusy (exit 3), a damaged file HistoryCorrupt (2)."""
        try:
            return self.db.execute(query, tuple(args)).fetchall()
        except sqlite3.DatabaseError as exc:
            if _is_busy(exc):
                raise _busy(self.path, self.busy_timeout_s, self.readonly) from None
            raise _corrupt(self.path, exc) from None

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    # --- writing -------------------------------------------------------------------------------------
    def start_run(self, run_id: str, started_at: str, golden_path: str, golden_hash: str, version: str) -> None:
        with self.transaction():
            self.db.execute("INSERT INTO runs (run_id, started_at, golden_path, golden_hash, gapcheck_version) "
                            "VALUES (?, ?, ?, ?, ?)", (run_id, started_at, golden_path, golden_hash, version))

    def finish_run(self, run_id: str, finished_at: str, exit_code: int) -> None:
        with self.transaction():
            self.db.execute("UPDATE runs SET finished_at = ?, exit_code = ? WHERE run_id = ?",
                            (finished_at, exit_code, run_id))

    def add_endpoint_result(self, record: EndpointRecord) -> None:
        """The endpoint's row and its outputs' rows in one transaction."""
        with self.transaction():
            cursor = self.db.execute(
                "INSERT INTO endpoint_results (run_id, endpoint, url, model, requested_version, served_version, "
                "config_hash, golden_hash, status, verdict, headline, error, samples, started_at, seconds, timings, "
                "precision) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.run_id, record.endpoint, record.url, record.model, record.requested_version,
                 record.served_version, record.config_hash, record.golden_hash, record.status, record.verdict,
                 record.headline, record.error, record.samples, record.started_at, record.seconds,
                 json.dumps(record.timings), record.precision))
            self.db.executemany(
                "INSERT INTO output_results (endpoint_result_id, output, verdict, max_abs_error, max_rel_error, "
                "mean_abs_error, mismatch_fraction, error_ratio, rtol, atol, worst_samples, cusum) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(cursor.lastrowid, o.output, o.verdict, _finite(o.max_abs_error), _finite(o.max_rel_error),
                  _finite(o.mean_abs_error), _finite(o.mismatch_fraction), _finite(o.error_ratio), o.rtol, o.atol,
                  json.dumps(list(o.worst_samples)), _finite(o.cusum)) for o in record.outputs])

    def add_alert(self, alert: AlertRecord) -> None:
        with self.transaction():
            self.db.execute("INSERT INTO alerts (run_id, endpoint, status, target, delivered, attempts, error, sent_at) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            (alert.run_id, alert.endpoint, alert.status, alert.target, int(alert.delivered),
                             alert.attempts, alert.error, alert.sent_at))

    # --- reading -------------------------------------------------------------------------------------
    def endpoint_history(self, endpoint: str, limit: int | None = None, *, before_run: str | None = None
                         ) -> list[EndpointRecord]:
        """The endpoint's results, oldest first (the last ``limit`` of them), excluding ``before_run``'s own."""
        query = "SELECT * FROM endpoint_results WHERE endpoint = ?"
        args: list[Any] = [endpoint]
        if before_run is not None:
            query += " AND run_id != ?"
            args.append(before_run)
        query += " ORDER BY id DESC"
        if limit is not None:
            query += " LIMIT ?"
            args.append(int(limit))
        rows = self._rows(query, args)
        outputs = self._outputs([int(row["id"]) for row in rows])
        return [self._record(row, outputs.get(int(row["id"]), [])) for row in reversed(rows)]

    def _outputs(self, ids: list[int]) -> dict[int, list[sqlite3.Row]]:
        """The output rows of endpoint results ``ids``, by result: a query per 500 results, not one per result (a
        night reads back 60 nights of its endpoint). Explicit ids: rows a writer adds meanwhile do not shift them."""
        found: dict[int, list[sqlite3.Row]] = {}
        for start in range(0, len(ids), 500):  # SQLite's default limit is 999 variables a statement
            chunk = ids[start:start + 500]
            for row in self._rows(f"SELECT * FROM output_results WHERE endpoint_result_id IN "
                                  f"({', '.join('?' * len(chunk))}) ORDER BY endpoint_result_id, output", chunk):
                found.setdefault(int(row["endpoint_result_id"]), []).append(row)
        return found

    def last_reachable(self, endpoint: str, model: str, version: str | None = None) -> str | None:
        """When ``endpoint`` last answered a night for ``model`` (at the ``version`` it pinned, None: none) with any
        status but unreachable, over its whole history, not only the nights a status reads back; None when never."""
        rows = self._rows("SELECT started_at FROM endpoint_results WHERE endpoint = ? AND model = ? AND "
                          "requested_version IS ? AND status != ? ORDER BY id DESC LIMIT 1",
                          [endpoint, model, version, "unreachable"])
        return str(rows[0]["started_at"]) if rows else None

    def endpoints(self) -> list[str]:
        return [str(r[0]) for r in self._rows("SELECT DISTINCT endpoint FROM endpoint_results ORDER BY endpoint")]

    def recent(self, *, endpoint: str | None = None, last: int | None = None) -> list[EndpointRecord]:
        """Endpoint results of the last ``last`` runs (all endpoints or one), oldest first."""
        names = [endpoint] if endpoint else self.endpoints()
        out: list[EndpointRecord] = []
        for name in names:
            out.extend(self.endpoint_history(name, last))
        return sorted(out, key=lambda r: (r.started_at, r.endpoint))

    def alerts(self, run_id: str | None = None) -> list[AlertRecord]:
        query, args = "SELECT * FROM alerts", ()  # type: tuple[str, tuple[str, ...]]
        if run_id:
            query, args = query + " WHERE run_id = ?", (run_id,)
        return [AlertRecord(r["run_id"], r["endpoint"], r["status"], r["target"], bool(r["delivered"]), r["attempts"],
                            r["error"], r["sent_at"]) for r in self._rows(query + " ORDER BY id", args)]

    def run_ids(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT run_id FROM runs ORDER BY started_at, run_id")]

    def _record(self, row: sqlite3.Row, outputs_rows: list[sqlite3.Row]) -> EndpointRecord:
        """One stored row and its outputs' rows as a record; a row that does not read back (broken JSON, a wrong type)
        is HistoryCorrupt."""
        try:
            outputs = tuple(
                OutputRecord(str(o["output"]), str(o["verdict"]), _number(o["max_abs_error"]),
                             _number(o["max_rel_error"]), _number(o["mean_abs_error"]), _number(o["mismatch_fraction"]),
                             _number(o["error_ratio"]), float(o["rtol"]), float(o["atol"]),
                             _json_list(o["worst_samples"]), _number(o["cusum"]))
                for o in outputs_rows)
            timings = json.loads(row["timings"])
            if not isinstance(timings, dict):
                raise TypeError("timings is not an object")
            return EndpointRecord(
                run_id=str(row["run_id"]), endpoint=str(row["endpoint"]), url=str(row["url"]), model=str(row["model"]),
                requested_version=row["requested_version"], served_version=row["served_version"],
                config_hash=row["config_hash"], golden_hash=str(row["golden_hash"]), status=str(row["status"]),
                verdict=str(row["verdict"]), headline=str(row["headline"]), error=row["error"],
                samples=int(row["samples"]), started_at=str(row["started_at"]), seconds=float(row["seconds"]),
                timings=timings, outputs=outputs, precision=str(row["precision"]))
        except (ValueError, TypeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise _corrupt(self.path, exc) from None

    def integrity_ok(self) -> bool:
        return self.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    def close(self) -> None:
        self.db.close()

    def close_behind(self) -> threading.Event:
        """Close on a thread, once everything is committed: the last connection's close runs the WAL checkpoint
        (two fsyncs, ~16 ms on the test machine, a third of a small night's own cost), which nothing the caller
        does next depends on — committed rows are already visible to every reader and survive a crash of this
        process (WAL + synchronous NORMAL, as before). The thread is started without waiting for it to be scheduled
        (``threading.Thread.start`` blocks the caller until then: milliseconds on a busy machine); the interpreter
        waits for the close at exit (:func:`wait_for_closes` is registered with ``atexit``), and
        :func:`wait_for_closes` waits for it sooner. Returns the event set once it is closed."""
        closed = threading.Event()
        with _CLOSING_GUARD:
            _CLOSING[:] = [e for e in _CLOSING if not e.is_set()]
            _CLOSING.append(closed)
        _thread.start_new_thread(self._close_quietly, (closed,))
        return closed

    def _close_quietly(self, closed: threading.Event) -> None:
        try:
            self.db.close()
        except sqlite3.Error as exc:  # the night is committed; the checkpoint runs again at the next open
            logger.warning("history %s: closing it failed after the night was recorded: %s", self.path, exc)
        finally:
            closed.set()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_CLOSING: list[threading.Event] = []  # histories being closed behind their callers (History.close_behind)
_CLOSING_GUARD = threading.Lock()


def wait_for_closes(timeout_s: float | None = None) -> None:
    """Wait until every history closed behind its caller is closed (its WAL checkpoint done)."""
    with _CLOSING_GUARD:
        closing = list(_CLOSING)
    for closed in closing:
        closed.wait(timeout_s)


# The closing threads are not joined by the interpreter (started with _thread): it waits for them here, at exit, while
# they still run (atexit callbacks run before the interpreter stops its threads).
atexit.register(wait_for_closes)


@contextmanager
def closed_behind(history: History) -> Iterator[History]:
    """``history`` for a ``with``: closed on a thread when the block succeeds (see :meth:`History.close_behind`),
    at once when it fails."""
    try:
        yield history
    except BaseException:
        history.close()
        raise
    history.close_behind()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (the connection runs in autocommit mode).

    A write SQLite cannot do (disk full, read-only file, I/O error) becomes :class:`HistoryWriteError`
    naming the history; the rollback leaves the database as it was before the transaction.
    """

    def __init__(self, db: sqlite3.Connection, path: Path, busy_timeout_s: float = 60.0) -> None:
        self.db, self.path, self.busy_timeout_s = db, path, busy_timeout_s

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._failed(exc) from None
        return self.db

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error as commit_error:
                exc = commit_error
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite already rolled back (a full disk does that itself)
        if isinstance(exc, sqlite3.OperationalError):  # full, read-only, I/O; a constraint error is a bug: as it is
            raise self._failed(exc) from None
        if exc_type is None:
            raise exc  # type: ignore[misc] - the COMMIT's own error

    def _failed(self, exc: sqlite3.OperationalError) -> GapcheckError:
        if _is_busy(exc):
            return _busy(self.path, self.busy_timeout_s)  # a transaction writes
        if "no such table" in str(exc) or "no such column" in str(exc):
            return _corrupt(self.path, exc)
        return HistoryWriteError(f"history {self.path} could not be written: {exc}",
                                 hint="free disk space or make the history writable; this night is not recorded")


def records_json(records: Iterable[EndpointRecord]) -> list[dict[str, Any]]:
    """Runs as plain objects (``gapcheck history --json``): run_id, started_at, endpoint, status, verdict, max_abs_error..."""
    out = []
    for r in records:
        errors = [o.max_abs_error for o in r.outputs if o.max_abs_error is not None]
        out.append({
            "run_id": r.run_id, "started_at": r.started_at, "endpoint": r.endpoint, "url": r.url, "model": r.model,
            "status": r.status, "verdict": r.verdict, "max_abs_error": max(errors) if errors else None,
            "served_version": r.served_version, "config_hash": r.config_hash, "golden_hash": r.golden_hash,
            "headline": r.headline, "error": r.error, "samples": r.samples, "seconds": r.seconds,
            "precision": r.precision,
            "outputs": [{"output": o.output, "verdict": o.verdict, "max_abs_error": o.max_abs_error,
                         "error_ratio": o.error_ratio, "cusum": o.cusum} for o in r.outputs],
        })
    return out


def last_with(records: Sequence[EndpointRecord], predicate) -> EndpointRecord | None:
    for record in reversed(records):
        if predicate(record):
            return record
    return None
