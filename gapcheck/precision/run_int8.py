"""INT8 through :mod:`gapcheck.precision.int8`: calibration and verification sets, the verdict against the
task-level targets, the sensitivity ranking, the fewest exclusions, the written and re-verified model."""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from gapcheck.codes.precision import (
    CALIBRATION_SAMPLE_SKIPPED,
    CALIBRATION_UNREPRESENTATIVE,
    PRECISION_FIX_INSUFFICIENT,
    PRECISION_FIX_VERIFIED,
    PRECISION_SENSITIVE,
    PRECISION_TARGET_MISSED,
)
from gapcheck.findings import Finding, Subject
from gapcheck.precision import int8
from gapcheck.precision.calibration import (
    add_batch_axis,
    check_fit,
    graph_inputs,
    load_calibration_set,
    shared_samples,
)
from gapcheck.precision.graph import ValueRunner
from gapcheck.precision.outcome import DEFAULT_TARGET, downgraded, write_fix
from gapcheck.precision.result import PrecisionResult
from gapcheck.precision.targets import score

TOP_SENSITIVE = 5  # modules named in findings (the table ranks them all)


def sample_sets(context: Any, mode: str) -> tuple[list, list, list[Finding], str]:
    """(calibration, verification, warnings, where the calibration came from). Verification: the real inputs when
    given (--inputs, or --text-samples tokenized), else the last quarter of the calibration set held out, else the
    (random) inputs."""
    request, model = context.request, context.graph.model
    real = real_inputs(request.inputs)
    warnings: list[Finding] = []
    names = [i.name for i in graph_inputs(model)]
    verification = context.samples
    if request.calibration is not None:
        loaded, skipped = load_calibration_set(request.calibration, names, stage=request.calibration_stage)
        calibration = add_batch_axis(loaded, model)
        if skipped:
            warnings.append(CALIBRATION_SAMPLE_SKIPPED.finding(
                f"{len(skipped)} calibration sample(s) skipped, {len(loaded)} used: {'; '.join(skipped[:5])}"
                + (f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""), where="calibration",
                evidence={"skipped": len(skipped), "used": len(loaded), "samples": skipped[:20]}))
        check_fit(model, calibration, "calibration")
        source = str(request.calibration)
        if real is None and len(calibration) >= 2:
            held = max(1, len(calibration) // 4)
            calibration, verification = calibration[:-held], calibration[-held:]
    else:
        calibration, source = context.samples, real or "random inputs"
    random_used = real is None and (request.calibration is None or verification is context.samples)
    if random_used:
        warnings.append(CALIBRATION_UNREPRESENTATIVE.finding(
            "INT8 is calibrated or verified on random inputs: ranges and errors on noise say little about real "
            "inputs; give --calibration and --inputs with real samples", where="inputs"))
    shared = shared_samples(calibration, verification) if mode == "static" else 0
    if shared:
        warnings.append(CALIBRATION_UNREPRESENTATIVE.finding(
            f"{shared} of {len(verification)} verification samples are calibration samples too: the target is "
            "measured on what the ranges were fitted to", where="inputs", evidence={"shared": shared}))
    return calibration, verification, warnings, source


def real_inputs(inputs: Any) -> str | None:
    """Where the real samples come from (None: random draws from the --input specs): an inputs file, or real text
    tokenized by the declared tokenizer (InputSource yields both the same way)."""
    if inputs.text_samples is not None:
        return f"the --text-samples sentences ({inputs.text_samples}, tokenized by {inputs.tokenizer})"
    return "the --inputs samples" if inputs.file is not None else None


def run_int8(context: Any) -> PrecisionResult:
    from gapcheck.precision.fp16 import reference

    request, graph = context.request, context.graph
    mode = int8.choose_mode(graph.model) if request.int8_mode == "auto" else request.int8_mode
    targets = request.targets or (DEFAULT_TARGET,)
    calibration, verification, findings, source = sample_sets(context, mode)
    refs = [r.outputs for r in reference(context.module, verification, graph, context.output_names)]

    def check(model: Any) -> Any:
        runner = ValueRunner(model, [])
        return score(refs, [{k: v for k, v in runner.run(s).items() if k in refs[0]} for s in verification])

    start = time.perf_counter()
    quantizer = int8.Quantizer(graph.model, mode, calibration, request.calibration_method)
    try:
        quantized = quantizer.quantize()
        scores = check(quantized)
        errors, local = int8.value_errors(graph, quantized, verification)
        alone = None
        if request.sensitivity == "alone":
            from gapcheck.precision.alone import output_errors

            alone = output_errors(graph, quantized, int8._units(graph, set(errors)), verification)
        rows = int8.sensitivity(context.module, graph, errors, local, alone)
        context.timings["sensitivity_s"] = time.perf_counter() - start
        details = {"mode": mode, "sensitivity_measure": request.sensitivity,
                   "calibration": {"source": source, "samples": len(calibration) if mode == "static" else 0,
                                   "method": request.calibration_method if mode == "static" else None},
                   "verification_samples": len(verification), "targets": [str(t) for t in targets],
                   "scores": scores.as_dict(), "quantized_nodes": _quantized(quantized)}
        if scores.meets(targets):
            return _passed(context, quantized, rows, scores, findings, details)
        findings += _missed(rows, scores, targets)
        if not request.fixing:
            return PrecisionResult("int8", tuple(findings), f"INT8 misses {', '.join(scores.missed(targets))}",
                                   tuple(rows), details=details)
        start = time.perf_counter()
        fixed = int8.fix(rows, quantizer, check, targets)
        context.timings["fix_s"] = time.perf_counter() - start
    finally:
        quantizer.close()
    return _fixed(context, rows, fixed, findings, details, targets)


def _reason(row: Any) -> str:
    if row.alone is not None:
        return f"quantized alone, it moves the outputs by {row.alone:.3g} (relative L2)"
    return f"adds {row.sensitivity:.3g} relative error"


def _quantized(model: Any) -> int:
    return sum(n.op_type in ("QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger")
               for n in model.graph.node)


def _missed(rows, scores, targets) -> list[Finding]:
    out = [PRECISION_TARGET_MISSED.finding(f"the INT8 model misses {', '.join(scores.missed(targets))}",
                                           where="outputs", evidence=scores.as_dict())]
    for row in [r for r in rows if r.sensitivity > 0][:TOP_SENSITIVE]:
        alone = "" if row.alone is None else f"; quantized alone it moves the outputs by {row.alone:.3g}"
        out.append(PRECISION_SENSITIVE.finding(
            f"{row.module} ({row.class_name}) adds {row.local or 0.0:.3g} relative error in INT8 (its output "
            f"{row.ratio:.3g}{alone})", where=row.module, subject=Subject(module=row.module),
            evidence={"nodes": list(row.nodes), "added_relative_error": row.local, "output_error_alone": row.alone}))
    return out


def _passed(context, quantized, rows, scores, findings, details) -> PrecisionResult:
    fix = None
    if context.request.fixing:
        path = write_fix(context.request, quantized)
        fix = {"path": str(path), "status": "verified", "kept": [], "modules": [], "nodes": [], "runs": 1,
               "verification": {"passed": True, "scores": scores.as_dict()}}
        findings = findings + [PRECISION_FIX_VERIFIED.finding(
            f"wrote {path}: every quantizable node in INT8; it meets the targets", where=str(path))]
    return PrecisionResult("int8", tuple(findings), f"INT8 meets the targets (cosine {scores.cosine:.5f})",
                           tuple(rows), fix=fix, details=details)


def _fixed(context, rows, fixed, findings, details, targets) -> PrecisionResult:
    # Every module excluded can leave no quantized op: that model is the FP32 one, not an INT8 fix.
    fp32_only = fixed.met and _quantized(fixed.model) == 0
    if fp32_only:
        fixed = dataclasses.replace(fixed, met=False)
    path = write_fix(context.request, fixed.model) if fixed.met else None
    total = len(context.graph.model.graph.node)
    trade = [{"excluded_modules": a.excluded_modules, "excluded_nodes": a.excluded_nodes, "met": a.met,
              **a.scores.as_dict()} for a in fixed.attempts]
    fix = {"path": str(path) if fixed.met else None, "status": "verified" if fixed.met else "insufficient",
           "kept": [{"module": r.module, "nodes": list(r.nodes), "reason": _reason(r)} for r in fixed.excluded],
           "modules": [r.module for r in fixed.excluded], "nodes": list(fixed.nodes), "runs": len(fixed.attempts),
           "verification": {"passed": fixed.met, "scores": fixed.scores.as_dict()}, "trade": trade}
    if fixed.met:
        findings = [downgraded(f, fixed.nodes) for f in findings] + [PRECISION_FIX_VERIFIED.finding(
            f"wrote {path}: {len(fixed.excluded)} module(s), {len(fixed.nodes)} of {total} nodes kept in FP32 "
            f"({', '.join(r.module for r in fixed.excluded)}); verified: cosine {fixed.scores.cosine:.5f}"
            + (f", top-1 agreement {fixed.scores.top1_agreement:.4f}" if fixed.scores.top1_agreement is not None
               else ""), where=str(path), evidence={"nodes": list(fixed.nodes)})]
        headline = f"INT8 fixed and verified: {len(fixed.nodes)} of {total} nodes in FP32"
    else:
        still = (f"only the FP32 model meets it: with all {len(fixed.excluded)} ranked modules in FP32 no INT8 op is "
                 "left" if fp32_only else f"with all {len(fixed.excluded)} ranked modules in FP32 the model still has "
                 f"{', '.join(fixed.scores.missed(targets))}")
        findings.append(PRECISION_FIX_INSUFFICIENT.finding(
            f"no exclusion set reaches {', '.join(str(t) for t in targets)}: {still}; nothing written",
            where="outputs"))
        headline = "INT8 not fixed: no exclusion set reaches the target"
    return PrecisionResult("int8", tuple(findings), headline, tuple(rows), fix=fix, details=details)


__all__ = ["run_int8", "sample_sets"]
