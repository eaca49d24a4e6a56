"""The report-contract result of ``gapcheck history``: the runs, and a trend per endpoint and output."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gapcheck.errors import UsageError
from gapcheck.findings import Verdict
from gapcheck.nightly.history import EndpointRecord, History, records_json
from gapcheck.report.contract import Chart, Check, ResultBase, Series, Table
from gapcheck.report.text import safe_line

_GOOD = ("pass", "recovered", "changed", "drifting")


@dataclass(frozen=True)
class HistoryResult(ResultBase):
    history: str
    records: tuple[EndpointRecord, ...]
    schema_version: int
    command: str = "history"

    @property
    def verdict(self) -> Verdict:
        """GAP when the latest result of any endpoint is not good (the state the history is in now)."""
        latest: dict[str, EndpointRecord] = {}
        for r in self.records:
            latest[r.endpoint] = r
        return Verdict.GAP if any(r.status not in _GOOD for r in latest.values()) else Verdict.PASS

    @property
    def headline(self) -> str:
        latest: dict[str, EndpointRecord] = {}
        for r in self.records:
            latest[r.endpoint] = r
        if not latest:
            return f"no runs recorded in {self.history}"
        states = ", ".join(f"{name}: {r.status}" for name, r in sorted(latest.items()))
        return f"{len(self.records)} endpoint results in {len({r.run_id for r in self.records})} runs; latest {states}"

    def sections(self) -> dict[str, Any]:
        return {"history": self.history, "history_schema_version": self.schema_version,
                "runs": records_json(self.records)}

    def views(self) -> Sequence[Table | Chart]:
        views: list[Table | Chart] = []
        # Names and times come from the history file: neutralized here, before any plotting library sees them
        # (matplotlib warns "Glyph 27 missing" with the raw character on stderr).
        for endpoint in sorted({r.endpoint for r in self.records}):
            mine = [r for r in self.records if r.endpoint == endpoint]
            outputs = sorted({o.output for r in mine for o in r.outputs})
            x = tuple(safe_line(r.started_at[:16].replace("T", " ")) for r in mine)
            marks = tuple(i for i, r in enumerate(mine) if r.status not in ("pass",))
            for output in outputs:
                ratios = tuple(next((o.error_ratio for o in r.outputs if o.output == output), None) for r in mine)
                errors = tuple(next((o.max_abs_error for o in r.outputs if o.output == output), None) for r in mine)
                views.append(Chart(
                    title=safe_line(f"{endpoint} / {output}"), kind="line", x=x,
                    series=(Series("max |err| / tolerance", _plottable(ratios)), Series("tolerance", tuple(1.0 for _ in x),
                                                                                        style="dashed")),
                    y_label="fraction of tolerance", marks=marks,
                    note="marked nights: " + ", ".join(f"{x[i]} {safe_line(mine[i].status)}" for i in marks) if marks
                    else f"max |err| from {_span(errors)}"))
        rows = tuple((r.run_id, r.started_at[:19].replace("T", " "), r.endpoint, r.status, r.verdict, _max(r),
                      r.served_version or "-", (r.config_hash or "-")[:12], r.error or "") for r in self.records)
        views.append(Table("Runs", ("run", "started", "endpoint", "status", "verdict", "max |err|", "served version",
                                    "config", "error"), rows,
                           tuple(i for i, r in enumerate(self.records) if r.status not in _GOOD),
                           note=f"history {self.history} (schema v{self.schema_version})"))
        return views

    def checks(self) -> Sequence[Check]:
        return [Check(name=f"{r.endpoint} {r.run_id}", classname="history",
                      failure=None if r.status in _GOOD else f"{r.status}: {r.headline}") for r in self.records]


def _plottable(values: Sequence[float | None]) -> tuple[float | None, ...]:
    return tuple(None if v is None or v != v or v == float("inf") else float(v) for v in values)


def _span(values: Sequence[float | None]) -> str:
    finite = [v for v in values if v is not None]
    return f"{min(finite):.3g} to {max(finite):.3g}" if finite else "-"


def _max(record: EndpointRecord) -> float | None:
    errors = [o.max_abs_error for o in record.outputs if o.max_abs_error is not None]
    return max(errors) if errors else None


def read_history(path: str | Path, *, endpoint: str | None = None, last: int | None = None,
                 lock_wait_s: float | None = None) -> HistoryResult:
    """The last ``last`` results of every endpoint (or one), read without taking the nightly lock (WAL readers).
    ``lock_wait_s`` bounds the wait for another SQLite writer's exclusive lock (default
    :data:`gapcheck.nightly.history.READ_BUSY_S`); past it: HistoryBusy, exit 3."""
    with History(path, readonly=True, busy_timeout_s=lock_wait_s) as history:
        known = history.endpoints()
        if endpoint is not None and endpoint not in known:
            # A misspelt name in a cron line must not read as "nothing wrong" (exit 0).
            raise UsageError(f"history {path} has no endpoint {endpoint!r}",
                             hint=f"it has: {', '.join(known) if known else 'none yet'}")
        records = tuple(history.recent(endpoint=endpoint, last=last))
        return HistoryResult(history=str(path), records=records, schema_version=history.schema_version)
