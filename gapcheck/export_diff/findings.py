"""Turn export-diff's measurements into findings: one sentence each, with the numbers that prove it."""
from __future__ import annotations

from typing import Sequence

from torch import nn

from gapcheck.export_diff.result import FAIL, BatchCheck, FirstDivergence, LayerResult, OutputResult
from gapcheck.findings import Finding, Severity
from gapcheck.model.export import ExportResult

# Modules whose behaviour differs between train() and eval().
_MODE_DEPENDENT = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd, nn.Dropout, nn.AlphaDropout)


def _samples_text(failing: Sequence[int], total: int) -> str:
    shown = ", ".join(str(s) for s in failing[:8]) + (", ..." if len(failing) > 8 else "")
    return f"sample(s) {shown} ({len(failing)} of {total})"


def build_findings(
    *,
    layers: Sequence[LayerResult],
    outputs: Sequence[OutputResult],
    first_divergence: FirstDivergence | None,
    batch_checks: Sequence[BatchCheck],
    exported: ExportResult,
    was_training: bool,
    kept_train_mode: bool,
    module: nn.Module,
    precision: str,
    overflow: dict[str, list[int]],
    layer_order: list[str],
    num_samples: int,
    reference_backend: str,
    foreign_scopes: Sequence[str] = (),
    nonfinite_outputs: Sequence[str] = (),
) -> list[Finding]:
    findings: list[Finding] = []
    if nonfinite_outputs:
        findings.append(Finding(
            "nonfinite_reference", Severity.WARNING,
            f"torch itself outputs NaN/Inf in {', '.join(nonfinite_outputs)}: matching NaN counts as equal, "
            "so these elements prove nothing",
            where=", ".join(nonfinite_outputs), evidence={"outputs": list(nonfinite_outputs)},
        ))
    if foreign_scopes:
        findings.append(Finding(
            "onnx_model_mismatch", Severity.GAP,
            f"the ONNX graph was exported from another model: it has modules this model lacks "
            f"({', '.join(foreign_scopes[:5])}{', ...' if len(foreign_scopes) > 5 else ''}); differences are not attributed",
            where="onnx", evidence={"unknown_modules": list(foreign_scopes)},
        ))
    if was_training:
        # Reported always; a gap only when the comparison really ran in training mode with modules that care.
        dependent = [p for p, m in module.named_modules() if isinstance(m, _MODE_DEPENDENT)]
        if not dependent:
            severity, consequence = Severity.INFO, "it has no BatchNorm/Dropout, so the mode changes nothing"
        elif kept_train_mode:
            severity, consequence = Severity.GAP, "kept in training mode as asked: batch statistics and active dropout are compared"
        else:
            severity, consequence = Severity.WARNING, "compared in eval mode; an export made in this state would bake in batch statistics / active dropout"
        findings.append(Finding(
            "training_mode", severity,
            f"the model was handed over in training mode ({len(dependent)} mode-dependent modules"
            f"{': ' + ', '.join(dependent[:6]) if dependent else ''}); {consequence}",
            where=", ".join(dependent[:6]),
            evidence={"mode_dependent_modules": dependent, "kept_train_mode": kept_train_mode},
        ))
    if exported.fallback_reason:
        findings.append(Finding(
            "export_fallback", Severity.WARNING,
            f"the dynamo exporter failed, the TorchScript exporter ran instead (it bakes in Python control flow): {exported.fallback_reason}",
            where="export", evidence={"exporter": exported.exporter},
        ))
    if exported.batch_baked:
        findings.append(Finding(
            "batch_size_baked", Severity.GAP,
            f"the {exported.exporter} exporter fixed the batch axis although a dynamic one was asked for: "
            "the ONNX model only accepts the export batch size",
            where="export", evidence={"exporter": exported.exporter},
        ))
    for note in exported.warnings:
        findings.append(Finding("export_warning", Severity.WARNING, note, where="export"))

    if overflow:
        first = min(overflow, key=layer_order.index)
        findings.append(Finding(
            "fp16_overflow", Severity.GAP,
            f"{first} overflows in FP16 (|x| > 65504 or Inf/NaN) on {_samples_text(overflow[first], num_samples)}",
            where=first, evidence={"modules": sorted(overflow, key=layer_order.index), "samples": overflow[first]},
        ))
    if first_divergence is not None:
        fd = first_divergence
        failing_layer = next(layer for layer in layers if layer.module == fd.module)
        how = "introduces the error" if fd.cause == "local" else (
            "inherits the error from its inputs" if fd.cause == "inherited" else "diverges (cause undetermined)")
        label = "FP16 " if precision != "fp32" else ""
        findings.append(Finding(
            "layer_divergence", Severity.GAP,
            f"{label}first divergence at {fd.module} ({failing_layer.class_name}): it {how}; max |err| {fd.output_max_abs:.3g}",
            where=f"{fd.module} @ {fd.source}" if fd.source else fd.module,
            evidence={
                "cause": fd.cause, "local_max_abs": fd.local_max_abs, "input_max_abs": fd.input_max_abs,
                "amplification": fd.amplification, "diverging_modules": sum(1 for x in layers if x.status == FAIL),
                "note": fd.note,
            },
        ))
        if precision == "fp32" and 0 < len(failing_layer.failing_samples) < num_samples:
            findings.append(Finding(
                "input_dependent_gap", Severity.GAP,
                f"{fd.module} diverges only on {_samples_text(failing_layer.failing_samples, num_samples)}: "
                "a data-dependent branch or shape baked in at export?",
                where=fd.module, evidence={"failing_samples": list(failing_layer.failing_samples)},
            ))
    reference_ok = {o.name: o.status != FAIL for o in outputs if o.backend == reference_backend}
    for output in outputs:
        if output.status != FAIL:
            continue
        stats = output.stats
        numbers = f"max |err| {stats.max_abs:.3g}, {stats.mismatch_fraction:.1%} of elements" if stats else ""
        if output.backend != reference_backend and reference_ok.get(output.name, False):
            code, message = "deployment_mismatch", f"ONNX Runtime matches torch; {output.backend} does not on output {output.name} ({numbers})"
        else:
            code, message = "output_mismatch", f"{output.backend} output {output.name} differs from torch ({numbers})"
        if stats is not None and stats.shape_mismatch:
            message += " - shapes differ"
        findings.append(Finding(code, Severity.GAP, message, where=f"{output.backend}:{output.name}",
                                evidence={"failing_samples": list(output.failing_samples)}))
    for check in batch_checks:
        if check.status == "error":
            findings.append(Finding(
                "batch_size_baked", Severity.GAP,
                f"ONNX Runtime refuses batch size {check.batch_size}: a batch size was baked in at export ({check.error})",
                where=f"batch={check.batch_size}", evidence={"error": check.error},
            ))
        elif check.status == FAIL:
            findings.append(Finding(
                "batch_inconsistency", Severity.GAP,
                f"output {check.output} of a sample changes with batch size {check.batch_size} or batch order "
                f"(max |err| {check.max_abs:.3g} at row {check.worst_row})",
                where=f"batch={check.batch_size}", evidence={"max_abs": check.max_abs, "row": check.worst_row},
            ))
    return findings
