"""Values that export-diff returns, and the report contract over them.

:class:`ExportDiffResult` implements :class:`~gapcheck.report.contract.CommandResult`: it decides
its verdict, headline, JSON sections, the views people look at (the module table, the error-by-depth
chart, the localization, the per-backend input SHA256) and the JUnit checks, all below the class in this
module (results hold their views, as every command's do). Every decision (which rows fail, which module is the
first divergence, what the tolerance budget is) is read from the result, never recomputed; renderers only format
these; nothing here imports torch or numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from gapcheck.compare import ErrorStats
from gapcheck.export_diff.records import (  # noqa: F401 - the values are part of this module's face
    FAIL,
    NO_ONNX,
    NOT_COMPARABLE,
    PASS,
    BatchCheck,
    Cause,
    FirstDivergence,
    InputRecord,
    LayerResult,
    OutputResult,
    Status,
    num,
)
from gapcheck.findings import Finding, Verdict
from gapcheck.report.contract import Chart, Check, Series, Table


@dataclass(frozen=True)
class ExportDiffResult:
    command: ClassVar[str] = "export-diff"

    findings: tuple[Finding, ...]
    layers: tuple[LayerResult, ...]
    outputs: tuple[OutputResult, ...]
    first_divergence: FirstDivergence | None
    inputs: tuple[InputRecord, ...]
    exporter: str
    fallback_reason: str | None
    precision: str
    num_samples: int
    batch_checks: tuple[BatchCheck, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    server_layers: tuple[Any, ...] = ()  # ServerLayer rows, when compared on a Triton twin
    padding: Any = None  # gapcheck.export_diff.padding.PaddingResult, with --pad-check
    onnx_model: Any = field(default=None, repr=False, compare=False)  # the ONNX model compared (onnx.ModelProto)
    # torch's names of every model output, in its order (the ONNX file may hold only some of them)
    model_outputs: tuple[str, ...] = ()

    @property
    def verdict(self) -> Verdict:
        return Verdict.of(self.findings)

    def __bool__(self) -> bool:  # truthy when there is no gap, as Polygraphy's results are
        return self.verdict is Verdict.PASS

    @property
    def headline(self) -> str:
        """The one sentence on top of the report."""
        fd = self.first_divergence
        if fd is not None:
            where = f" ({fd.source})" if fd.source else ""
            ops = f" [{', '.join(fd.op_types)}]" if fd.op_types else ""
            return f"first divergence: {fd.module}{ops} {fd.how}{where}, max |err| {fd.output_max_abs:.3g} on sample {fd.sample}"
        gaps = [f for f in self.findings if f.is_gap]
        if gaps:
            codes = ", ".join(dict.fromkeys(f.code for f in gaps))
            return f"{len(gaps)} gap finding(s): {codes}"
        compared = sum(1 for layer in self.layers if layer.status in (PASS, FAIL))
        return f"no gap: {compared} modules and {len(self.outputs)} outputs match over {self.num_samples} sample(s)"

    @property
    def run_summary(self) -> str:
        fallback = f" (dynamo failed: {self.fallback_reason})" if self.fallback_reason else ""
        return f"exporter: {self.exporter}{fallback} · precision: {self.precision} · samples: {self.num_samples}"

    # --- the report contract ------------------------------------------------------------------
    def sections(self) -> dict[str, Any]:
        return _sections(self)

    def views(self) -> tuple[Table | Chart, ...]:
        return _views(self)

    def checks(self) -> list[Check]:
        return _checks(self)


def _stats_json(stats: ErrorStats | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    return {
        "passed": stats.passed, "max_abs": stats.max_abs, "max_rel": stats.max_rel, "mean_abs": stats.mean_abs,
        "mismatch_fraction": stats.mismatch_fraction, "nonfinite_mismatch": stats.nonfinite_mismatch,
        "shape_mismatch": stats.shape_mismatch, "rtol": stats.rtol, "atol": stats.atol,
        "expected_absmax": stats.expected_absmax,
        "worst_index": list(stats.worst_index) if stats.worst_index else None,
    }


# --- JSON sections ------------------------------------------------------------------------------
def _sections(result: ExportDiffResult) -> dict[str, Any]:
    fd = result.first_divergence
    return {
        "exporter": result.exporter,
        "fallback_reason": result.fallback_reason,
        "precision": result.precision,
        "num_samples": result.num_samples,
        "first_divergence": None if fd is None else {
            "module": fd.module, "cause": str(fd.cause), "source": fd.source, "op_types": list(fd.op_types),
            "sample": fd.sample, "output_max_abs": fd.output_max_abs, "input_max_abs": fd.input_max_abs,
            "local_max_abs": fd.local_max_abs, "amplification": fd.amplification, "note": fd.note,
        },
        "layers": [_layer_json(layer) for layer in result.layers],
        "outputs": [
            {"backend": o.backend, "name": o.name, "status": str(o.status), "worst_sample": o.worst_sample,
             "failing_samples": list(o.failing_samples), "note": o.note, "error": _stats_json(o.stats)}
            for o in result.outputs
        ],
        "batch_checks": [
            {"batch_size": c.batch_size, "order": c.order, "output": c.output, "status": str(c.status),
             "max_abs": c.max_abs, "worst_row": c.worst_row, "error": c.error}
            for c in result.batch_checks
        ],
        "server_layers": [
            {"module": row.module, "onnx_value": row.onnx_value, "status": str(row.status), "error": _stats_json(row.stats)}
            for row in result.server_layers
        ],
        "inputs": [
            {"sample": i.sample, "name": i.name, "shape": list(i.shape), "dtype": i.dtype, "sha256": dict(i.sha256)}
            for i in result.inputs
        ],
        "padding": None if result.padding is None else result.padding.sections()["padding"],
    }


def _layer_json(layer: LayerResult) -> dict[str, Any]:
    return {
        "order": layer.order, "module": layer.module, "class": layer.class_name, "op_types": list(layer.op_types),
        "onnx_value": layer.onnx_value, "status": str(layer.status), "source": layer.source, "note": layer.note,
        "worst_sample": layer.worst_sample, "failing_samples": list(layer.failing_samples),
        "budget_abs": layer.budget_abs, "noise_floor": layer.noise_floor, "error": _stats_json(layer.stats),
    }


# --- views --------------------------------------------------------------------------------------
def _views(result: ExportDiffResult) -> tuple[Table | Chart, ...]:
    out: list[Table | Chart] = [module_table(result)]
    chart = error_by_depth(result)
    if chart is not None:
        out.append(chart)
    if result.first_divergence is not None:
        out.append(localization_table(result))
    out.append(outputs_table(result))
    if result.batch_checks:
        out.append(batch_table(result))
    if result.server_layers:
        out.append(server_table(result))
    if result.padding is not None:
        out.extend(result.padding.views())
    if result.inputs:
        out.append(inputs_table(result))
    return tuple(out)


def _verdict_cell(layer: LayerResult, num_samples: int) -> str:
    if layer.failing_samples:
        return f"{layer.status} ({len(layer.failing_samples)}/{num_samples})"
    return str(layer.status)


def module_table(result: ExportDiffResult) -> Table:

    rows = []
    for layer in result.layers:
        stats = layer.stats
        rows.append((
            str(layer.order) if layer.order >= 0 else "-", layer.module, layer.class_name, ",".join(layer.op_types),
            num(stats.max_abs if stats else None), num(stats.max_rel if stats else None), num(layer.budget_abs),
            f"{stats.mismatch_fraction:.1%}" if stats else "-", _verdict_cell(layer, result.num_samples), layer.note,
        ))
    failing = tuple(i for i, layer in enumerate(result.layers) if layer.status == FAIL)
    return Table("module outputs, torch vs ONNX Runtime (worst sample)",
                 ("#", "module", "class", "ONNX ops", "max abs", "max rel", "budget", "mismatch", "verdict", "note"),
                 tuple(rows), highlight=failing, note=result.run_summary)


def error_by_depth(result: ExportDiffResult) -> Chart | None:
    """Max abs / max rel error per module in execution order, the budget as a line, the first divergence marked.

    Modules without an ONNX counterpart stay on the x axis with no value, so the line breaks there.
    """

    executed = sorted((layer for layer in result.layers if layer.order >= 0), key=lambda layer: layer.order)
    if not executed:
        return None

    def compared(layer: LayerResult) -> bool:
        return layer.stats is not None and layer.status in (PASS, FAIL)

    abs_err = tuple(layer.stats.max_abs if compared(layer) and layer.stats else None for layer in executed)
    rel_err = tuple(layer.stats.max_rel if compared(layer) and layer.stats else None for layer in executed)
    budget = tuple(layer.budget_abs if compared(layer) else None for layer in executed)
    fd = result.first_divergence
    marks = tuple(i for i, layer in enumerate(executed) if fd is not None and layer.module == fd.module)
    gaps = sum(1 for value in abs_err if value is None)
    return Chart(
        "error by depth (execution order)", kind="line", x=tuple(layer.module for layer in executed),
        series=(Series("max abs error", abs_err), Series("max rel error", rel_err, style="dashed"),
                Series("tolerance budget (abs)", budget, style="step")),
        y_label="error (log)", log_y=True, marks=marks,
        note=(f"first divergence marked: {fd.module}. " if fd else "")
        + (f"{gaps} module(s) without an ONNX counterpart (or not comparable) are gaps in the lines; "
           "an exact match (0) is not drawn on the log axis." if gaps else "An exact match (0) is not drawn on the log axis."),
    )


def localization_table(result: ExportDiffResult) -> Table:

    fd = result.first_divergence
    assert fd is not None
    rows: tuple[tuple[str, str], ...] = (("module", fd.module), ("cause", f"{fd.cause}: {fd.how}"), ("source", fd.source or "-"),
            ("ONNX ops", ", ".join(fd.op_types) or "-"), ("sample", str(fd.sample)),
            ("output max |err|", num(fd.output_max_abs)), ("input max |err|", num(fd.input_max_abs)),
            ("local max |err| (torch's inputs)", num(fd.local_max_abs)), ("amplification", num(fd.amplification)),
            ("note", fd.note or "-"))
    if fd.fused:
        rows += (("fused group", " + ".join(fd.group)),)
    rows += tuple(("differs from the checkpoint", d) for d in fd.differences)
    return Table("localization of the first divergence", ("", "value"), rows)


def outputs_table(result: ExportDiffResult) -> Table:

    rows = tuple((o.backend, o.name, num(o.stats.max_abs if o.stats else None), num(o.stats.max_rel if o.stats else None),
                  f"{o.stats.mismatch_fraction:.1%}" if o.stats else "-", str(o.status), o.note) for o in result.outputs)
    failing = tuple(i for i, o in enumerate(result.outputs) if o.status == FAIL)
    return Table("graph outputs vs torch", ("backend", "output", "max abs", "max rel", "mismatch", "verdict", "note"),
                 rows, highlight=failing)


def batch_table(result: ExportDiffResult) -> Table:

    rows = tuple((c.batch_size, c.order, c.output, num(c.max_abs),
                  str(c.status) if c.error is None else f"{c.status}: {c.error[:120]}") for c in result.batch_checks)
    failing = tuple(i for i, c in enumerate(result.batch_checks) if c.status != PASS)
    return Table("batch consistency (row i of a batch vs sample i alone)",
                 ("batch size", "order", "output", "max abs", "verdict"), rows, highlight=failing)


def server_table(result: ExportDiffResult) -> Table:

    rows = tuple((row.module, num(row.stats.max_abs), num(row.stats.max_rel), str(row.status)) for row in result.server_layers)
    failing = tuple(i for i, row in enumerate(result.server_layers) if row.status == FAIL)
    return Table(f"on the Triton server (twin): {len(rows) - len(failing)} of {len(rows)} modules match torch",
                 ("module", "max abs", "max rel", "verdict"), rows, highlight=failing)


def inputs_table(result: ExportDiffResult) -> Table:
    backends = list(dict.fromkeys(b for record in result.inputs for b in record.sha256))
    rows = []
    differs = []
    for i, record in enumerate(result.inputs):
        hashes = [record.sha256.get(b, "-") for b in backends]
        if len({h for h in hashes if h != "-"}) > 1:
            differs.append(i)
        rows.append((record.sample, record.name, "x".join(str(d) for d in record.shape), record.dtype,
                     *(h[:16] if h != "-" else h for h in hashes)))
    return Table("inputs fed to each backend (SHA256, first 16 hex digits)",
                 ("sample", "input", "shape", "dtype", *backends), tuple(rows), highlight=tuple(differs),
                 note="highlighted: a backend was fed different bytes" if differs else "")


# --- JUnit --------------------------------------------------------------------------------------
def _checks(result: ExportDiffResult) -> list[Check]:
    """One case per compared module and per backend output, per server layer, per batch check, and one failing case
    per gap finding, whatever its code (a run that exits 1 on a Triton config gap fails in CI's JUnit view too)."""
    cases = []
    for layer in result.layers:
        stats = layer.stats
        details = f"max_abs={num(stats.max_abs)} max_rel={num(stats.max_rel)}" if stats else layer.note
        if layer.status == FAIL:
            cases.append(Check(layer.module, "export_diff.layers", f"{layer.module} diverges: {details}", details))
        elif layer.status == PASS:
            cases.append(Check(layer.module, "export_diff.layers", None, details))
        else:
            cases.append(Check(layer.module, "export_diff.layers", skipped=layer.note or str(layer.status)))
    for out in result.outputs:
        details = f"max_abs={num(out.stats.max_abs)}" if out.stats else ""
        failure = f"{out.backend} output {out.name} differs from torch: {details}" if out.status == FAIL else None
        cases.append(Check(f"{out.backend}:{out.name}", "export_diff.outputs", failure, details))
    for row in result.server_layers:
        details = f"max_abs={num(row.stats.max_abs)}"
        cases.append(Check(row.module, "export_diff.server_layers", None if row.status == PASS else details, details))
    for check in result.batch_checks:
        failure = None if check.status == PASS else (check.error or f"max_abs={num(check.max_abs)} at row {check.worst_row}")
        cases.append(Check(f"batch={check.batch_size}:{check.order}:{check.output}", "export_diff.batch", failure))
    if result.padding is not None:
        cases.extend(result.padding.checks())
    names = {c.name for c in cases}
    for finding in result.findings:
        if not finding.is_gap:
            continue
        name = f"{finding.code} {finding.where}".strip()
        while name in names:  # CI tools merge JUnit cases that share a name
            name += " (again)"
        names.add(name)
        cases.append(Check(name, f"export_diff.findings.{finding.code}", finding.message, finding.where))
    return cases
