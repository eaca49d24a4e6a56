"""A deployment that computes in FP16: its config declares FP16 tensors where gapcheck's FP32 export has FP32.

A model converted to FP16 for serving (onnxconverter-common with ``keep_io_types=False``, a TensorRT FP16 engine) is
served with ``TYPE_FP16`` inputs and outputs. Audited against gapcheck's own export (FP32), each such tensor is a
``triton_dtype_mismatch``; but that export is gapcheck's, not the deployment's file, and FP16 is the deployment's
choice. So when every data type that differs is FP16 served for FP32 in the graph, those findings give way to one
``fp16_deployment`` (info): the FP32 samples are cast to FP16 where the server takes FP16 (as its clients do) and the
run compares with FP16 budgets unless others were asked. Against the deployment's own file (``--onnx``) a
disagreement between the file and the config stays the audit's gap: that file is what the server loads, and an FP16
file that takes FP16 inputs is fed them cast the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gapcheck.codes.export_diff import FP16_DEPLOYMENT
from gapcheck.findings import Finding, Subject

_DTYPE_MISMATCH = "triton_dtype_mismatch"
__all__ = ["FP16", "ServedPrecision", "declared_precision", "served_precision", "widened"]
FP16 = "TYPE_FP16"
_FLOAT = frozenset({"TYPE_FP32", FP16})


@dataclass(frozen=True)
class ServedPrecision:
    """What the deployment's declared data types mean for the comparison."""

    findings: list[Finding] = field(default_factory=list)
    input_dtypes: dict[str, str] = field(default_factory=dict)  # served input -> the dtype samples are sent as
    fp16: bool = False  # the deployment computes in FP16 (its run compares with FP16 budgets unless others asked)


def widened(finding: Finding) -> bool:
    """An audit finding that says only: FP16 served where the graph has FP32."""
    evidence = finding.evidence or {}
    return finding.code == _DTYPE_MISMATCH and evidence.get("served") == FP16 and evidence.get("onnx") == "TYPE_FP32"


def served_precision(audit: Any, findings: list[Finding], *, own_export: bool, budgets: str) -> ServedPrecision:
    """The audit's ``findings`` with FP16 declarations resolved, the input casts, and whether it computes in FP16.

    ``audit`` is a :class:`~gapcheck.triton.audit_result.TritonAuditResult`; ``own_export``: the graph audited
    against is gapcheck's FP32 export (not the deployment's file); ``budgets``: the precision the run will compare
    in if the deployment computes in FP16 (the message says which).
    """
    return declared_precision(audit.model, audit.served, {t.name: t.data_type for t in audit.onnx_inputs}, findings,
                              own_export=own_export, budgets=budgets)


def declared_precision(model: str, served: Any, graph_types: dict[str, str], findings: list[Finding], *,
                       own_export: bool, budgets: str) -> ServedPrecision:
    """:func:`served_precision` from what it reads: the served model's declarations (a
    :class:`~gapcheck.triton.audit_result.ServedModel`, None when unknown) and the graph's input data types
    (``TYPE_FP32``...). ``gapcheck nightly`` calls it with what its readiness step read, before any request."""
    if served is None:
        return ServedPrecision(findings)
    half_in = [t.name for t in served.inputs if t.data_type == FP16 and graph_types.get(t.name, FP16) in _FLOAT]
    half_out = [t.name for t in served.outputs if t.data_type == FP16]
    if not half_in and not half_out:
        return ServedPrecision(findings)
    if any(widened(f) for f in findings) and not own_export:
        return ServedPrecision(findings)  # the file and the config disagree: the audit's gaps stand
    kept = [f for f in findings if not widened(f)]
    what = " and ".join(part for part in (
        f"input{'s' if len(half_in) > 1 else ''} {', '.join(half_in)}" if half_in else "",
        f"output{'s' if len(half_out) > 1 else ''} {', '.join(half_out)}" if half_out else "") if part)
    source = "where gapcheck's FP32 export has FP32" if own_export else "as the file does"
    sent = f"; the FP32 samples are cast to FP16 as they are sent (as its clients do: {', '.join(half_in)})" \
        if half_in else ""
    kept.append(FP16_DEPLOYMENT.finding(
        f"{model} declares {what} FP16 {source}: the deployment computes in FP16{sent}; its outputs are "
        f"compared with {budgets.upper()} budgets", where=model, subject=Subject(endpoint=model),
        evidence={"fp16_inputs": half_in, "fp16_outputs": half_out, "budgets": budgets,
                  "graph": "gapcheck export" if own_export else "file"}))
    return ServedPrecision(kept, {name: "float16" for name in half_in}, True)
