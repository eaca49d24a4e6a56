"""Renderers for export-diff: the console table, the JSON document and the JUnit cases."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gapcheck.compare import ErrorStats
from gapcheck.export_diff.result import FAIL, NO_ONNX, PASS, ExportDiffResult
from gapcheck.report.console import print_findings, print_verdict
from gapcheck.report.junit import JUnitCase

_STATUS_STYLE = {PASS: "green", FAIL: "bold red", NO_ONNX: "dim", "n/a": "dim", "error": "bold red"}


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def render_console(console: Console, result: ExportDiffResult, *, max_rows: int | None = None) -> None:
    console.print(
        f"exporter: [bold]{result.exporter}[/bold]"
        + (f" (dynamo failed: {escape(result.fallback_reason)})" if result.fallback_reason else "")
        + f" · precision: {result.precision} · samples: {result.num_samples}"
    )
    table = Table(title="module outputs, torch vs ONNX Runtime (worst sample)", show_lines=False, expand=False)
    for column, justify in [("#", "right"), ("module", "left"), ("class", "left"), ("ONNX ops", "left"),
                            ("max abs", "right"), ("max rel", "right"), ("mismatch", "right"), ("verdict", "left")]:
        table.add_column(column, justify=justify, overflow="fold")
    rows = result.layers if max_rows is None else _rows_around_divergence(result, max_rows)
    for layer in rows:
        stats = layer.stats
        style = _STATUS_STYLE.get(layer.status, "")
        verdict = layer.status + (f" ({len(layer.failing_samples)}/{result.num_samples})" if layer.failing_samples else "")
        table.add_row(
            str(layer.order) if layer.order >= 0 else "-",
            escape(layer.module),
            escape(layer.class_name),
            escape(",".join(layer.op_types)),
            _num(stats.max_abs if stats else None),
            _num(stats.max_rel if stats else None),
            f"{stats.mismatch_fraction:.1%}" if stats else "-",
            f"[{style}]{escape(verdict)}[/{style}]",
        )
    console.print(table)
    notes = [layer for layer in rows if layer.note and layer.status not in (PASS, NO_ONNX)]
    notes += [layer for layer in rows if layer.status == PASS and "called" in layer.note]
    for layer in notes:
        console.print(f"[dim]  {escape(layer.module)}: {escape(layer.note)}[/dim]")
    if max_rows is not None and len(rows) < len(result.layers):
        console.print(f"[dim]({len(result.layers) - len(rows)} more modules in the JSON report; --max-rows 0 shows all)[/dim]")
    outputs = Table(title="graph outputs vs torch")
    for column in ("backend", "output", "max abs", "max rel", "mismatch", "verdict"):
        outputs.add_column(column)
    for out in result.outputs:
        style = _STATUS_STYLE.get(out.status, "")
        outputs.add_row(
            escape(out.backend), escape(out.name), _num(out.stats.max_abs if out.stats else None),
            _num(out.stats.max_rel if out.stats else None),
            f"{out.stats.mismatch_fraction:.1%}" if out.stats else "-", f"[{style}]{out.status}[/{style}]",
        )
    console.print(outputs)
    if result.batch_checks:
        batches = Table(title="batch consistency (row i of a batch vs sample i alone)")
        for column in ("batch size", "order", "output", "max abs", "verdict"):
            batches.add_column(column)
        for check in result.batch_checks:
            style = _STATUS_STYLE.get(check.status, "")
            verdict = check.status if check.error is None else f"{check.status}: {check.error[:120]}"
            batches.add_row(str(check.batch_size), check.order, escape(check.output), _num(check.max_abs),
                            f"[{style}]{escape(verdict)}[/{style}]")
        console.print(batches)
    if result.server_layers:
        failing = [row for row in result.server_layers if row.status == FAIL]
        server = Table(title=f"on the Triton server (twin): {len(result.server_layers) - len(failing)} of "
                             f"{len(result.server_layers)} modules match torch")
        for column in ("module", "max abs", "max rel", "verdict"):
            server.add_column(column)
        for row in failing or result.server_layers[:5]:
            style = _STATUS_STYLE.get(row.status, "")
            server.add_row(escape(row.module), _num(row.stats.max_abs), _num(row.stats.max_rel), f"[{style}]{row.status}[/{style}]")
        console.print(server)
    print_findings(console, result.findings)
    if result.first_divergence is not None and result.first_divergence.note:
        console.print(f"[dim]localization: {escape(result.first_divergence.note)}[/dim]")
    print_verdict(console, result.verdict, result.headline)


def _rows_around_divergence(result: ExportDiffResult, max_rows: int):
    """At most ``max_rows`` rows: every failing row first, then the rest in order."""
    if max_rows <= 0 or len(result.layers) <= max_rows:
        return result.layers
    failing = [layer for layer in result.layers if layer.status == FAIL]
    chosen = set(id(x) for x in failing[:max_rows])
    for layer in result.layers:
        if len(chosen) >= max_rows:
            break
        chosen.add(id(layer))
    return tuple(layer for layer in result.layers if id(layer) in chosen)


def _stats_json(stats: ErrorStats | None) -> dict[str, Any] | None:
    if stats is None:
        return None
    return {
        "passed": stats.passed, "max_abs": stats.max_abs, "max_rel": stats.max_rel, "mean_abs": stats.mean_abs,
        "mismatch_fraction": stats.mismatch_fraction, "nonfinite_mismatch": stats.nonfinite_mismatch,
        "shape_mismatch": stats.shape_mismatch, "rtol": stats.rtol, "atol": stats.atol,
        "worst_index": list(stats.worst_index) if stats.worst_index else None,
    }


def json_payload(result: ExportDiffResult) -> dict[str, Any]:
    """The export-diff JSON document (``schema_version`` and ``command`` are added by write_json)."""
    fd = result.first_divergence
    return {
        "verdict": result.verdict,
        "headline": result.headline,
        "exporter": result.exporter,
        "fallback_reason": result.fallback_reason,
        "precision": result.precision,
        "num_samples": result.num_samples,
        "first_divergence": None if fd is None else {
            "module": fd.module, "cause": fd.cause, "source": fd.source, "op_types": list(fd.op_types),
            "sample": fd.sample, "output_max_abs": fd.output_max_abs, "input_max_abs": fd.input_max_abs,
            "local_max_abs": fd.local_max_abs, "amplification": fd.amplification, "note": fd.note,
        },
        "findings": list(result.findings),
        "layers": [
            {
                "order": layer.order, "module": layer.module, "class": layer.class_name, "op_types": list(layer.op_types),
                "onnx_value": layer.onnx_value, "status": layer.status, "source": layer.source, "note": layer.note,
                "worst_sample": layer.worst_sample, "failing_samples": list(layer.failing_samples),
                "error": _stats_json(layer.stats),
            }
            for layer in result.layers
        ],
        "outputs": [
            {"backend": o.backend, "name": o.name, "status": o.status, "worst_sample": o.worst_sample,
             "failing_samples": list(o.failing_samples), "error": _stats_json(o.stats)}
            for o in result.outputs
        ],
        "batch_checks": list(result.batch_checks),
        "server_layers": [
            {"module": row.module, "onnx_value": row.onnx_value, "status": row.status, "error": _stats_json(row.stats)}
            for row in result.server_layers
        ],
        "inputs": [
            {"sample": i.sample, "name": i.name, "shape": list(i.shape), "dtype": i.dtype, "sha256": i.sha256}
            for i in result.inputs
        ],
        "timings": result.timings,
    }


def junit_cases(result: ExportDiffResult) -> list[JUnitCase]:
    """One testcase per compared module and per backend output, plus one per batch check."""
    cases = []
    for layer in result.layers:
        stats = layer.stats
        details = f"max_abs={_num(stats.max_abs)} max_rel={_num(stats.max_rel)}" if stats else layer.note
        if layer.status == FAIL:
            cases.append(JUnitCase(layer.module, "export_diff.layers", f"{layer.module} diverges: {details}", details))
        elif layer.status == PASS:
            cases.append(JUnitCase(layer.module, "export_diff.layers", None, details))
        else:
            cases.append(JUnitCase(layer.module, "export_diff.layers", skipped=layer.note or layer.status))
    for out in result.outputs:
        details = f"max_abs={_num(out.stats.max_abs)}" if out.stats else ""
        failure = f"{out.backend} output {out.name} differs from torch: {details}" if out.status == FAIL else None
        cases.append(JUnitCase(f"{out.backend}:{out.name}", "export_diff.outputs", failure, details))
    for row in result.server_layers:
        details = f"max_abs={_num(row.stats.max_abs)}"
        cases.append(JUnitCase(row.module, "export_diff.server_layers", None if row.status == PASS else details, details))
    for check in result.batch_checks:
        failure = None if check.status == PASS else (check.error or f"max_abs={_num(check.max_abs)} at row {check.worst_row}")
        cases.append(JUnitCase(f"batch={check.batch_size}:{check.order}:{check.output}", "export_diff.batch", failure))
    for finding in result.findings:
        if finding.is_gap and finding.code in ("training_mode", "batch_size_baked", "fp16_overflow"):
            cases.append(JUnitCase(finding.code, "export_diff.findings", finding.message, finding.where))
    return cases
