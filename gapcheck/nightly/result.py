"""The report-contract result of ``gapcheck nightly``: one section per endpoint, its status against history."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.codes.nightly import GOLDEN_MISMATCH, OUTPUT_TYPE
from gapcheck.errors import ExitCode
from gapcheck.findings import Finding, Severity, Verdict
from gapcheck.nightly.alerts import Delivery
from gapcheck.nightly.probe import EndpointOutcome
from gapcheck.nightly.status import Classification, Status
from gapcheck.report.contract import Chart, Check, ResultBase, Series, Table
from gapcheck.report.text import safe_line


def _finite(value: float | None) -> float | None:
    return None if value is None or value != value or value in (float("inf"), float("-inf")) else float(value)


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _nonfinite(comparison: Any) -> str:
    """", 12 NaN of 12 served values" when the server sent NaN or inf (an all-NaN answer reads max |err| inf)."""
    said = comparison.nonfinite() if hasattr(comparison, "nonfinite") else ""
    return f", {said}" if said else ""


def _share(ratio: float | None) -> str:
    """An error as a share of its tolerance: "42%" up to 10x, then "3.5e+03x" (a percentage would be unreadable)."""
    if ratio is None:
        return "-"
    return f"{ratio:.0%}" if ratio < 10 else f"{ratio:.3g}x"


def _short(finding: Finding) -> str:
    """A golden finding in the headline: its code and the causes it names (the message is in the findings)."""
    causes = finding.evidence.get("causes")
    if isinstance(causes, list):
        return f"{finding.code} ({', '.join(safe_line(str(c)) for c in causes) or 'no cause reproduced'})"
    return finding.code


@dataclass(frozen=True)
class EndpointReport:
    outcome: EndpointOutcome
    classification: Classification
    findings: tuple[Finding, ...]
    last_pass_at: str | None = None  # when this endpoint last passed (before tonight)
    failing_since: str | None = None  # the first night of the current run of gaps/outages (tonight for a new one)
    # The recent nights and tonight, oldest first: (started_at, status, {output: error ratio}) for the trend chart.
    trend: tuple[tuple[str, str, dict[str, float | None]], ...] = ()
    misconfigured: bool = False  # the server lacks the model of an endpoint never reachable before: a misspelt name

    def trend_charts(self) -> list[Chart]:
        if len(self.trend) < 2:
            return []
        # Names and times from the bundle and the history, neutralized before any plotting library sees them.
        x = tuple(safe_line(t[0][5:16].replace("T", " ")) for t in self.trend)
        marks = tuple(i for i, t in enumerate(self.trend) if t[1] != Status.PASS.value)
        outputs = sorted({o for t in self.trend for o in t[2]})
        return [Chart(title=safe_line(f"{self.name} / {output}: error over the last {len(x)} nights"), kind="line",
                      x=x, series=(Series("max |err| / tolerance", tuple(_finite(t[2].get(output)) for t in self.trend)),
                                   Series("tolerance", tuple(1.0 for _ in x), style="dashed")),
                      y_label="fraction of tolerance", marks=marks,
                      note=", ".join(f"{x[i]} {safe_line(self.trend[i][1])}" for i in marks))
                for output in outputs]

    @property
    def name(self) -> str:
        return self.outcome.spec.name

    @property
    def status(self) -> Status:
        return self.classification.status

    @property
    def verdict(self) -> Verdict:
        return Verdict.of(self.findings)

    @property
    def headline(self) -> str:
        o = self.outcome
        since = f" (since {self.failing_since[:16].replace('T', ' ')})" if self.failing_since and \
            self.status in (Status.KNOWN_FAILURE, Status.UNREACHABLE) else ""
        if not o.reachable:
            return f"{self.name}: unreachable{since}: {o.error}"
        failing = [c for c in o.outputs if not c.passed]
        if failing or self.verdict is Verdict.GAP:
            outputs = ", ".join(f"{c.output} ({c.type_problem})" if c.type_problem else
                                f"{c.output} (max |err| {c.max_abs:.3g}{_nonfinite(c)}, {c.failing_samples} samples)"
                                for c in failing)
            gaps = ", ".join(dict.fromkeys(f.code for f in self.findings if f.is_gap))
            return f"{self.name}: {self.status.value}{since}: {outputs or f'deployment gap: {gaps} (see findings)'}"
        worst = max((c.error_ratio for c in o.outputs), default=0.0)
        return f"{self.name}: {self.status.value}: {len(o.outputs)} outputs within tolerance (worst at {_share(worst)} of it)"

    def worst_outputs(self) -> list[dict[str, Any]]:
        ranked = sorted(self.outcome.outputs, key=lambda c: (c.passed, -c.error_ratio))
        return [{"output": c.output, "passed": c.passed, "max_abs_error": c.max_abs, "error_ratio": c.error_ratio,
                 "failing_samples": c.failing_samples, "worst_samples": [w.as_dict() for w in c.worst]}
                for c in ranked]

    def section(self) -> dict[str, Any]:
        o, c = self.outcome, self.classification
        return {
            "name": self.name, "url": o.spec.display_url, "model": o.spec.model, "requested_version": o.spec.version,
            "status": self.status.value, "previous_status": c.previous_status, "verdict": self.verdict.value,
            "headline": self.headline, "reachable": o.reachable, "error": o.error,
            "last_pass_at": self.last_pass_at, "failing_since": self.failing_since,
            "served_version": o.served_version, "config_hash": o.config_hash, "max_batch_size": o.max_batch_size,
            "precision": o.precision,
            "changes": [{"what": ch.what, "before": ch.before, "after": ch.after} for ch in c.changes],
            "drifting_outputs": list(c.drifting_outputs),
            "samples": o.samples,
            "outputs": [{"output": x.output, "passed": x.passed, "max_abs_error": x.max_abs, "max_rel_error": x.max_rel,
                         "mean_abs_error": x.mean_abs, "mismatch_fraction": x.mismatch_fraction,
                         "error_ratio": x.error_ratio, "failing_samples": x.failing_samples, "rtol": x.rtol,
                         "atol": x.atol, "cusum": c.cusum.get(x.output), "shape_mismatch": x.shape_mismatch,
                         "worst_samples": [w.as_dict() for w in x.worst]} for x in o.outputs],
            "requests": list(o.requests),
            "timings": dict(o.seconds),
        }


@dataclass(frozen=True)
class NightlyResult(ResultBase):
    run_id: str
    started_at: str
    golden: dict[str, Any]
    history: str
    endpoints: tuple[EndpointReport, ...]
    alerts: tuple[Delivery, ...] = ()
    extra_findings: tuple[Finding, ...] = ()  # about the run itself (e.g. webhook failures)
    golden_findings: tuple[Finding, ...] = ()  # about the bundle's inputs (the tokenizer check, gapcheck.nightly.text)
    seconds: dict[str, float] = field(default_factory=dict)
    command: str = "nightly"

    @property
    def findings(self) -> tuple[Finding, ...]:  # type: ignore[override]
        return tuple(f for e in self.endpoints for f in e.findings) + self.golden_findings + self.extra_findings

    @property
    def exit_code(self) -> ExitCode:
        """2 when an endpoint names a model its server never had (a misspelt name: a retry cannot mend it), 3 when
        any endpoint could not be checked (the night is incomplete), else 1 on any gap, else 0."""
        if any(e.misconfigured for e in self.endpoints):
            return ExitCode.USAGE
        if any(e.status is Status.UNREACHABLE for e in self.endpoints):
            return ExitCode.BACKEND
        return ExitCode.GAP_FOUND if self.verdict is Verdict.GAP else ExitCode.NO_GAP

    @property
    def headline(self) -> str:
        counts: dict[str, int] = {}
        for e in self.endpoints:
            counts[e.status.value] = counts.get(e.status.value, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        bad = [e.headline for e in self.endpoints if e.status not in (Status.PASS,)]
        bad += [_short(f) for f in self.golden_findings if f.severity is not Severity.INFO]
        return f"{len(self.endpoints)} endpoint(s): {summary}" + (f" — {'; '.join(bad)}" if bad else "")

    @property
    def timings(self) -> Mapping[str, float]:
        return dict(self.seconds)

    def sections(self) -> dict[str, Any]:
        return {
            "run": {"run_id": self.run_id, "started_at": self.started_at, "history": self.history,
                    "exit_code": int(self.exit_code)},
            "golden": self.golden,
            "endpoints": [e.section() for e in self.endpoints],
            "alerts": [{"endpoint": d.alert.endpoint, "status": d.alert.status, "target": d.target,
                        "delivered": d.delivered, "attempts": d.attempts, "error": d.error} for d in self.alerts],
        }

    def views(self) -> Sequence[Table | Chart]:
        rows, highlight = [], []
        for i, e in enumerate(self.endpoints):
            o = e.outcome
            worst = max(o.outputs, key=lambda c: c.error_ratio, default=None)
            rows.append((e.name, o.spec.display_url, e.status.value, o.served_version or "-",
                         (o.config_hash or "-")[:12], _g(worst.max_abs if worst else None),
                         _share(worst.error_ratio if worst else None), f"{o.seconds.get('total', 0.0):.1f}s",
                         o.error or ""))
            if e.status not in (Status.PASS, Status.RECOVERED, Status.DRIFTING):
                highlight.append(i)
        views: list[Table | Chart] = [Table(
            "Endpoints", ("endpoint", "url", "status", "served version", "config", "max |err|", "of tolerance",
                          "time", "error"), tuple(rows), tuple(highlight),
            note=f"run {self.run_id} · golden {self.golden.get('bundle_hash', '')[:12]} · history {self.history}")]
        worst_rows = []
        for e in self.endpoints:
            for w in e.worst_outputs():
                samples = ", ".join(f"#{s['sample']} ({s['max_abs_error']:.3g})" for s in w["worst_samples"][:3])
                worst_rows.append((e.name, w["output"], "pass" if w["passed"] else "gap", _g(w["max_abs_error"]),
                                   _share(w["error_ratio"]), w["failing_samples"], samples))
        if worst_rows:
            views.append(Table("Worst outputs", ("endpoint", "output", "verdict", "max |err|", "of tolerance",
                                                 "failing samples", "worst samples"), tuple(worst_rows),
                               tuple(i for i, r in enumerate(worst_rows) if r[2] == "gap")))
        for e in self.endpoints:
            views.extend(e.trend_charts())
        return views

    def checks(self) -> Sequence[Check]:
        """Every endpoint is at least one case: one per compared output, and one failing case per gap finding that no
        failing output case already shows, whatever its code (a deployment gap such as ``golden_output_missing`` or
        ``triton_name_mismatch`` fails in CI's JUnit view as the exit code does); an endpoint with neither is one case
        of its own."""
        cases: list[Check] = []
        for e in self.endpoints:
            cases += _endpoint_checks(e)
        cases += [Check(name=f"golden {f.code}", classname="nightly.golden", failure=f.message)
                  for f in self.golden_findings if f.is_gap]
        return cases


def _endpoint_checks(e: EndpointReport) -> list[Check]:
    classname = f"nightly.{e.name}"
    if not e.outcome.reachable:
        return [Check(name=f"{e.name} reachable", classname=classname, failure=f"unreachable: {e.outcome.error}",
                      details=e.outcome.spec.display_url)]
    cases, failing = [], set()
    for c in e.outcome.outputs:
        failure = None if c.passed else f"{c.failing_samples} samples beyond tolerance, max |err| {c.max_abs:.3g}"
        if failure is not None:
            failing.add(c.output)
        cases.append(Check(name=f"{e.name} / {c.output}", classname=classname, failure=failure,
                           details=f"status {e.status.value}; max |err| {c.max_abs:.3g}; "
                                   f"{_share(c.error_ratio)} of tolerance"))
    names = {c.name for c in cases}
    for f in e.findings:
        if not f.is_gap or (f.subject.output in failing and f.code in _SHOWN_BY_OUTPUT):
            continue
        name = f"{e.name} {f.code}" + (f" {f.subject.output}" if f.subject.output else "")
        while name in names:  # CI tools merge cases that share a name
            name += " (again)"
        names.add(name)
        cases.append(Check(name=name, classname=classname, failure=f.message))
    if not cases:  # nothing compared and nothing found: still one case, so the endpoint shows in the suite
        cases.append(Check(name=e.name, classname=classname, details=f"status {e.status.value}; no output compared"))
    return cases


# Gap codes whose failing output case already says the failure (the output's values or type)
_SHOWN_BY_OUTPUT = (GOLDEN_MISMATCH.code, OUTPUT_TYPE.code)
