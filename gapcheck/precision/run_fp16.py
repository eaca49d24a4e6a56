"""FP16 through :mod:`gapcheck.precision.fp16`: findings, the fix written only once verified, the result."""
from __future__ import annotations

import math
import time
from typing import Any

from gapcheck.codes.export_diff import FP16_OVERFLOW
from gapcheck.codes.precision import (
    PRECISION_FIX_INSUFFICIENT,
    PRECISION_FIX_VERIFIED,
    PRECISION_SENSITIVE,
    PRECISION_TARGET_MISSED,
)
from gapcheck.findings import Finding, Subject
from gapcheck.precision import fp16
from gapcheck.precision.outcome import downgraded, write_fix
from gapcheck.precision.result import PrecisionResult


def _findings(analysis: fp16.Analysis) -> list[Finding]:
    out = []
    overflowing = [r.module for r in analysis.rows if r.sensitivity == math.inf]
    for row in analysis.rows:
        if row.sensitivity == math.inf and any(m.startswith(row.module + ".") for m in overflowing):
            continue  # its submodule overflows: named there, not again for every module around it
        subject = Subject(module=row.module)
        evidence = {"nodes": list(row.nodes), "overflow": row.overflow, "underflow": row.underflow,
                    "out_of_range": row.out_of_range, "local_error_ratio": row.local}
        if row.sensitivity == math.inf:
            out.append(FP16_OVERFLOW.finding(
                f"{row.module} ({row.class_name}) produces {row.out_of_range:.1%} of its values beyond FP16's range "
                f"(|x| > 65504): {row.overflow} Inf/NaN in FP16", where=row.module, subject=subject, evidence=evidence))
        elif row.local is not None and row.local > 1:
            out.append(PRECISION_SENSITIVE.finding(
                f"{row.module} ({row.class_name}) misses the FP16 tolerance on its own: fed the reference inputs, its "
                f"FP16 ops reach {row.local:.3g}x the budget", where=row.module, subject=subject, evidence=evidence))
    if not analysis.verification.passed and not out:
        out.append(PRECISION_TARGET_MISSED.finding(
            f"the FP16 model misses the tolerance ({analysis.verification.worst}); no module fails on its own: the "
            "error accumulates", where=analysis.verification.failing[0]))
    return out


def beyond_range(context: Any, analysis: fp16.Analysis) -> dict[str, Any]:
    """Values beyond FP16's range in the FP32 reference, whatever ONNX Runtime made of them: it runs some ops in FP32
    (casts it inserts for ops without an FP16 kernel, fused normalizations), a TensorRT FP16 engine may not."""
    graph = context.graph
    ids = {n.name: i for i, n in enumerate(graph.model.graph.node)}
    rows = []
    for value in analysis.hot_values[:20]:
        node = graph.producer_of(value)
        rows.append({"value": value, "node": node, "module": graph.owner(ids[node]) if node in ids else None})
    return {"values": rows, "count": len(analysis.hot_values),
            "note": "beyond 65504 in the FP32 reference; the verdict is ONNX Runtime's FP16 (CPU), which runs ops "
                    "without an FP16 kernel in FP32: a TensorRT FP16 engine may overflow there"}


def _fix_section(fix: fp16.Fix, written: Any) -> dict[str, Any]:
    return {"path": None if written is None else str(written),
            "status": "verified" if fix.verification.passed else "insufficient",
            "kept": [{"module": g.module, "nodes": list(g.nodes), "reason": g.reason} for g in fix.kept],
            "modules": [g.module for g in fix.kept], "nodes": list(fix.block_list), "runs": fix.runs,
            "verification": {"passed": fix.verification.passed, "failing": list(fix.verification.failing),
                             "worst": fix.verification.worst}}


def run_fp16(context: Any) -> PrecisionResult:
    request, graph = context.request, context.graph
    policy = request.tolerance.policy("fp16")
    start = time.perf_counter()
    refs = fp16.reference(context.module, context.samples, graph, context.output_names)
    analysis = fp16.analyze(context.module, graph, context.samples, refs, policy)
    context.timings["analysis_s"] = time.perf_counter() - start
    findings = _findings(analysis)
    if analysis.verification.passed:
        return _clean(context, analysis, findings)
    if not request.fixing:
        return PrecisionResult("fp16", tuple(findings), f"FP16 misses the tolerance: {analysis.verification.worst}",
                               tuple(analysis.rows), details={"samples": len(context.samples),
                                                              "beyond_fp16_range": beyond_range(context, analysis)})
    start = time.perf_counter()
    fixed = fp16.fix(graph, analysis, context.samples, refs, policy, max_runs=request.max_runs)
    context.timings["fix_s"] = time.perf_counter() - start
    details = {"samples": len(context.samples), "beyond_fp16_range": beyond_range(context, analysis),
               "tensorrt": fp16.tensorrt_settings(fixed.block_list)}
    nodes = len(fixed.block_list)
    if fixed.verification.passed:
        written = write_fix(request, fixed.model)
        modules = ", ".join(g.module for g in fixed.kept)
        findings = [downgraded(f, fixed.block_list) for f in findings] + [PRECISION_FIX_VERIFIED.finding(
            f"wrote {written}: {nodes} of {len(graph.model.graph.node)} nodes kept in FP32 ({modules}); "
            f"the written model passes the FP16 tolerance layer by layer ({fixed.runs} verification run(s))",
            where=str(written), evidence={"nodes": list(fixed.block_list)})]
        headline = f"FP16 fixed and verified: {nodes} node(s) in FP32 ({modules})"
    else:
        written = None
        findings.append(PRECISION_FIX_INSUFFICIENT.finding(
            f"keeping {nodes} node(s) in FP32 is not enough after {fixed.runs} verification run(s): still off: "
            f"{', '.join(fixed.verification.failing[:5])} ({fixed.verification.worst}); nothing written",
            where=fixed.verification.failing[0] if fixed.verification.failing else "model"))
        headline = f"FP16 not fixed: {fixed.verification.worst}"
    return PrecisionResult("fp16", tuple(findings), headline, tuple(analysis.rows),
                           fix=_fix_section(fixed, written), details=details)


def _clean(context: Any, analysis: fp16.Analysis, findings: list[Finding]) -> PrecisionResult:
    """Nothing needs FP32: with --fix the plain FP16 model (verified by the run just made) is the written model."""
    from gapcheck.precision.fp16 import to_precision

    fix = None
    if context.request.fixing:
        path = write_fix(context.request, to_precision(context.graph.model, "fp16"))
        fix = {"path": str(path), "status": "verified", "kept": [], "modules": [], "nodes": [], "runs": 0,
               "verification": {"passed": True, "failing": [], "worst": ""}}
        findings = [*findings, PRECISION_FIX_VERIFIED.finding(
            f"wrote {path}: the whole model in FP16 (no module needs FP32; it passes layer by layer)", where=str(path))]
    return PrecisionResult("fp16", tuple(findings), "FP16 passes as it is: no module needs FP32",
                           tuple(analysis.rows), fix=fix, details={"samples": len(context.samples),
                                                                   "beyond_fp16_range": beyond_range(context, analysis)})
