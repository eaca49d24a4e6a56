"""ProfileReport: a step-time breakdown as a gapcheck result (the report contract), so it renders to
JSON, console and HTML like every command's result. It computes its shares and bottleneck here;
renderers only format. This module imports nothing heavy.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gapcheck.codes.guards import PROFILE_BOTTLENECK
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.guards.phases import PHASES, Phase, bottleneck_headline, bottleneck_of, phase_shares
from gapcheck.report.contract import Chart, ResultBase, Series, Table

COMMAND = "profile-steps"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


@dataclass(frozen=True)
class ProfileReport(ResultBase):
    """Seconds per phase for each measured step (``step_times[i][j]`` is step i, phase ``PHASES[j]``)."""

    step_times: tuple[tuple[float, ...], ...]
    warmup: int
    device: str
    method: str  # "timers" or "timers+profiler"
    findings: tuple[Finding, ...] = ()
    trace_path: str | None = None
    top_ops: tuple[tuple[str, float, int], ...] = ()  # (op name, self ms over the measured steps, calls)
    epochs_started: int = 1
    command: str = COMMAND

    # -- numbers -----------------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return len(self.step_times)

    def phase_values(self, phase: Phase) -> list[float]:
        index = PHASES.index(phase)
        return [step[index] for step in self.step_times]

    @property
    def totals(self) -> dict[Phase, float]:
        return {phase: sum(self.phase_values(phase)) for phase in PHASES}

    @property
    def total(self) -> float:
        return sum(self.totals.values())

    @property
    def shares(self) -> dict[Phase, float]:
        return phase_shares(self.totals)

    @property
    def bottleneck(self) -> Phase:
        return bottleneck_of(self.totals)

    @property
    def headline(self) -> str:
        return bottleneck_headline(self.totals) if self.steps else "no step measured"

    @property
    def timings(self) -> Mapping[str, float]:
        return {"measured_steps_s": self.total, "mean_step_s": self.total / self.steps if self.steps else 0.0}

    # -- the report contract -----------------------------------------------------------------------
    def phase_rows(self) -> list[dict[str, Any]]:
        shares = self.shares
        rows = []
        for phase in PHASES:
            values = self.phase_values(phase)
            rows.append({"phase": phase.value, "label": phase.label, "total_s": sum(values),
                         "mean_ms": 1e3 * statistics.fmean(values) if values else 0.0,
                         "median_ms": 1e3 * statistics.median(values) if values else 0.0,
                         "p90_ms": 1e3 * _quantile(values, 0.9), "share": shares[phase]})
        return rows

    def sections(self) -> dict[str, Any]:
        phase = self.bottleneck
        return {"profile": {
            "steps": self.steps, "warmup": self.warmup, "device": self.device, "method": self.method,
            "epochs_started": self.epochs_started, "phases": self.phase_rows(),
            "bottleneck": {"phase": phase.value, "share": self.shares[phase], "advice": phase.advice},
            "per_step_ms": [[1e3 * value for value in step] for step in self.step_times],
            "trace": self.trace_path,
            "top_ops": [{"name": name, "self_ms": ms, "calls": calls} for name, ms, calls in self.top_ops],
        }}

    def views(self) -> Sequence[Table | Chart]:
        rows = self.phase_rows()
        table = Table(title=f"Step time by phase ({self.steps} steps on {self.device}, {self.method})",
                      columns=("phase", "mean ms", "median ms", "p90 ms", "share"),
                      rows=tuple((r["label"], r["mean_ms"], r["median_ms"], r["p90_ms"], f"{r['share']:.1%}")
                                 for r in rows),
                      highlight=(PHASES.index(self.bottleneck),), note=self.headline)
        views: list[Table | Chart] = [table]
        views.append(Chart(title="Share of step time", kind="bar", x=tuple(p.label for p in PHASES),
                           series=(Series("share", tuple(self.shares[p] for p in PHASES), style="bar"),),
                           y_label="share", marks=(PHASES.index(self.bottleneck),)))
        views.append(Chart(title="Milliseconds per step", kind="line", x=tuple(str(i + 1) for i in range(self.steps)),
                           series=tuple(Series(p.label, tuple(1e3 * v for v in self.phase_values(p)))
                                        for p in PHASES if any(self.phase_values(p))), y_label="ms"))
        if self.top_ops:
            views.append(Table(title="Top ops by self time (torch.profiler)", columns=("op", "self ms", "calls"),
                               rows=tuple(self.top_ops)))
        return views


def bottleneck_finding(report: ProfileReport) -> Finding:
    """The bottleneck as a finding: informational when compute-bound, a warning when the step waits on anything else."""
    phase = report.bottleneck
    share = report.shares[phase]
    return PROFILE_BOTTLENECK.finding(
        report.headline, subject=Subject(step=phase.value),
        evidence={"phase": phase.value, "share": share, "steps": report.steps,
                  "mean_step_ms": 1e3 * report.total / report.steps if report.steps else 0.0},
        severity=Severity.INFO if phase is Phase.FORWARD_BACKWARD else Severity.WARNING)
