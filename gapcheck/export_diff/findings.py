"""Turn export-diff's measurements into findings: one sentence each, with the numbers that prove it.

The runner gathers what it measured into one :class:`Facts` value; each builder below reads the
facts of one finding family and returns its findings. A new family is one new builder appended to
:data:`BUILDERS` (and its code declared in :mod:`gapcheck.codes.export_diff`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapcheck.codes import export_diff as codes
from gapcheck.export_diff.result import FAIL, BatchCheck, FirstDivergence, LayerResult, OutputResult, Status
from gapcheck.findings import Finding, Severity, Subject


@dataclass(frozen=True)
class Facts:
    """Everything the builders read (the runner fills it once)."""

    layers: Sequence[LayerResult]
    outputs: Sequence[OutputResult]
    first_divergence: FirstDivergence | None
    batch_checks: Sequence[BatchCheck]
    exported: Any  # gapcheck.model.export.ExportResult: exporter, fallback_reason, batch_baked, warnings
    was_training: bool
    kept_train_mode: bool
    module: Any  # the torch.nn.Module compared (read only: named_modules)
    precision: str
    overflow: dict[str, list[int]]
    layer_order: list[str]
    num_samples: int
    reference_backend: str
    foreign_scopes: Sequence[str] = ()
    nonfinite_outputs: Sequence[str] = field(default_factory=tuple)


def _samples_text(failing: Sequence[int], total: int) -> str:
    shown = ", ".join(str(s) for s in failing[:8]) + (", ..." if len(failing) > 8 else "")
    return f"sample(s) {shown} ({len(failing)} of {total})"


def nonfinite_reference(facts: Facts) -> list[Finding]:
    if not facts.nonfinite_outputs:
        return []
    names = ", ".join(facts.nonfinite_outputs)
    return [codes.NONFINITE_REFERENCE.finding(
        f"torch itself outputs NaN/Inf in {names}: matching NaN counts as equal, so these elements prove nothing",
        subject=Subject(endpoint="torch", output=names), evidence={"outputs": list(facts.nonfinite_outputs)})]


def onnx_model_mismatch(facts: Facts) -> list[Finding]:
    foreign = list(facts.foreign_scopes)
    if not foreign:
        return []
    shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
    return [codes.ONNX_MODEL_MISMATCH.finding(
        f"the ONNX graph was exported from another model: it has modules this model lacks ({shown}); "
        "differences are not attributed", where="onnx", subject=Subject(stage="onnx"),
        evidence={"unknown_modules": foreign})]


def _mode_dependent_modules(module: Any) -> list[str]:
    from torch import nn

    kinds = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd)
    return [path for path, child in module.named_modules() if isinstance(child, kinds)]


def training_mode(facts: Facts) -> list[Finding]:
    """Reported always; a gap only when the comparison really ran in training mode with modules that care."""
    if not facts.was_training:
        return []
    dependent = _mode_dependent_modules(facts.module)
    if not dependent:
        severity, consequence = Severity.INFO, "it has no BatchNorm/Dropout, so the mode changes nothing"
    elif facts.kept_train_mode:
        severity, consequence = Severity.GAP, "kept in training mode as asked: batch statistics and active dropout are compared"
    else:
        severity, consequence = (Severity.WARNING, "compared in eval mode; an export made in this state would bake in "
                                 "batch statistics / active dropout")
    listed = ": " + ", ".join(dependent[:6]) if dependent else ""
    return [codes.TRAINING_MODE.finding(
        f"the model was handed over in training mode ({len(dependent)} mode-dependent modules{listed}); {consequence}",
        severity=severity, where=", ".join(dependent[:6]), subject=Subject(stage="model"),
        evidence={"mode_dependent_modules": dependent, "kept_train_mode": facts.kept_train_mode})]


def export_notes(facts: Facts) -> list[Finding]:
    """The exporter's own signals: a fallback to TorchScript, a baked batch axis, warnings."""
    exported, found = facts.exported, []
    if exported.fallback_reason:
        found.append(codes.EXPORT_FALLBACK.finding(
            "the dynamo exporter failed, the TorchScript exporter ran instead (it bakes in Python control flow): "
            f"{exported.fallback_reason}", where="export", subject=Subject(stage="export"),
            evidence={"exporter": exported.exporter}))
    if exported.batch_baked:
        found.append(codes.BATCH_SIZE_BAKED.finding(
            f"the {exported.exporter} exporter fixed the batch axis although a dynamic one was asked for: "
            "the ONNX model only accepts the export batch size", where="export", subject=Subject(stage="export"),
            evidence={"exporter": exported.exporter}))
    for note in exported.warnings:
        found.append(codes.EXPORT_WARNING.finding(note, where="export", subject=Subject(stage="export", group=note[:80])))
    return found


def fp16_overflow(facts: Facts) -> list[Finding]:
    if not facts.overflow:
        return []
    order = facts.layer_order
    first = min(facts.overflow, key=order.index)
    return [codes.FP16_OVERFLOW.finding(
        f"{first} overflows in FP16 (|x| > 65504 or Inf/NaN) on {_samples_text(facts.overflow[first], facts.num_samples)}",
        subject=Subject(module=first),
        evidence={"modules": sorted(facts.overflow, key=order.index), "samples": facts.overflow[first]})]


def layer_divergence(facts: Facts) -> list[Finding]:
    fd = facts.first_divergence
    if fd is None:
        return []
    failing_layer = next(layer for layer in facts.layers if layer.module == fd.module)
    label = "FP16 " if facts.precision != "fp32" else ""
    fused = f", first member of the fused group {' + '.join(fd.group)}" if fd.fused else ""
    what = "".join(f"; {d}" for d in fd.differences)
    found = [codes.LAYER_DIVERGENCE.finding(
        f"{label}first divergence at {fd.module} ({failing_layer.class_name}{fused}): it {fd.how}; "
        f"max |err| {fd.output_max_abs:.3g}{what}",
        where=f"{fd.module} @ {fd.source}" if fd.source else fd.module, subject=Subject(module=fd.module),
        evidence={"cause": str(fd.cause), "local_max_abs": fd.local_max_abs, "input_max_abs": fd.input_max_abs,
                  "amplification": fd.amplification, "fused_group": list(fd.group), "differences": list(fd.differences),
                  "diverging_modules": sum(1 for x in facts.layers if x.status == FAIL), "note": fd.note})]
    if facts.precision == "fp32" and 0 < len(failing_layer.failing_samples) < facts.num_samples:
        found.append(codes.INPUT_DEPENDENT_GAP.finding(
            f"{fd.module} diverges only on {_samples_text(failing_layer.failing_samples, facts.num_samples)}: "
            "a data-dependent branch or shape baked in at export?", subject=Subject(module=fd.module),
            evidence={"failing_samples": list(failing_layer.failing_samples)}))
    return found


def output_mismatch(facts: Facts) -> list[Finding]:
    """A failing output: a deployment mismatch when the reference backend matches there, else an output mismatch."""
    reference_ok = {o.name: o.status != FAIL for o in facts.outputs if o.backend == facts.reference_backend}
    found = []
    for output in facts.outputs:
        if output.status != FAIL:
            continue
        stats = output.stats
        numbers = f"max |err| {stats.max_abs:.3g}, {stats.mismatch_fraction:.1%} of elements" if stats else ""
        if output.backend != facts.reference_backend and reference_ok.get(output.name, False):
            code = codes.DEPLOYMENT_MISMATCH
            message = f"ONNX Runtime matches torch; {output.backend} does not on output {output.name} ({numbers})"
        else:
            code, message = codes.OUTPUT_MISMATCH, f"{output.backend} output {output.name} differs from torch ({numbers})"
        if stats is not None and stats.shape_mismatch:
            message += " - shapes differ"
        found.append(code.finding(message, where=f"{output.backend}:{output.name}",
                                  subject=Subject(endpoint=output.backend, output=output.name),
                                  evidence={"failing_samples": list(output.failing_samples)}))
    return found


def batch_findings(facts: Facts) -> list[Finding]:
    found = []
    for check in facts.batch_checks:
        subject = Subject(group=f"batch={check.batch_size}", output=check.output, step=check.order)
        if check.status == Status.ERROR:
            found.append(codes.BATCH_SIZE_BAKED.finding(
                f"ONNX Runtime refuses batch size {check.batch_size}: a batch size was baked in at export ({check.error})",
                where=f"batch={check.batch_size}", subject=subject, evidence={"error": check.error}))
        elif check.status == FAIL:
            found.append(codes.BATCH_INCONSISTENCY.finding(
                f"output {check.output} of a sample changes with batch size {check.batch_size} or batch order "
                f"(max |err| {check.max_abs:.3g} at row {check.worst_row})",
                where=f"batch={check.batch_size}", subject=subject, evidence={"max_abs": check.max_abs, "row": check.worst_row}))
    return found


#: The builders, in report order.
BUILDERS: tuple[Callable[[Facts], list[Finding]], ...] = (
    nonfinite_reference, onnx_model_mismatch, training_mode, export_notes, fp16_overflow, layer_divergence,
    output_mismatch, batch_findings,
)


def findings_from(facts: Facts) -> list[Finding]:
    return [finding for build in BUILDERS for finding in build(facts)]


def build_findings(**facts: Any) -> list[Finding]:
    """Keyword form of :func:`findings_from` (the keywords are :class:`Facts`' fields)."""
    return findings_from(Facts(**facts))
