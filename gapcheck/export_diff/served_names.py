"""The deployment's own output names: pair served outputs with the graph's by position, or by an explicit map.

gapcheck's export names outputs after the model (``logits``); the user's deployment names them its own way
(``b``, ``c``, ``a``). When the served outputs differ from the graph's by name only — same count, and pairwise in
order the same data type and compatible shapes — they are paired by position, their values compared, and the
naming reported as a warning that shows the pairing. ``output_map`` (``{graph_name: served_name}``) pairs them
explicitly when position is not the right rule. A real mismatch (another count, a data type or a shape that
differs) keeps the Triton audit's gap findings; a served output that holds another tensor fails on its values.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gapcheck.codes.export_diff import SERVED_OUTPUT_NAMES
from gapcheck.errors import UsageError
from gapcheck.findings import Finding, Subject
from gapcheck.triton.names import compatible_shape

_NAME_MISMATCH = "triton_name_mismatch"
_AUDIT_PAIRING = "triton_served_names"  # the audit's own note of the pairing: this module's warning replaces it


def _pairing(onnx_outputs: Sequence[Any], served: Sequence[Any], output_map: Mapping[str, str]) -> dict[str, str]:
    """graph name -> served name for every graph output, or {} when no pairing holds."""
    served_names = [t.name for t in served]
    onnx_names = [o.name for o in onnx_outputs]
    for graph_name, served_name in output_map.items():
        if graph_name not in onnx_names or served_name not in served_names:
            raise UsageError(
                f"output map {graph_name}={served_name}: the graph's outputs are {', '.join(onnx_names)}, the "
                f"served ones {', '.join(served_names)}", parameter="triton_output_map")
    if output_map:
        rest = [o for o in onnx_names if o not in output_map]
        free = [t for t in served_names if t not in output_map.values()]
        pairs = dict(output_map) | {o: o for o in rest if o in free}
        return pairs if len(pairs) == len(onnx_names) else {}
    if len(onnx_outputs) != len(served):
        return {}
    return {o.name: t.name for o, t in zip(onnx_outputs, served, strict=True)}


def _same_type(graph: str, served: str, fp16: bool) -> bool:
    """The same data type; with an FP16 deployment (:mod:`~gapcheck.export_diff.served_precision`), FP16 served for
    the export's FP32 too."""
    return graph == served or (fp16 and (graph, served) == ("TYPE_FP32", "TYPE_FP16"))


def served_output_names(audit: Any, output_map: Mapping[str, str] | None = None, *, fp16: bool = False,
                        findings: list[Finding] | None = None) -> tuple[list[Finding], dict[str, str]]:
    """The audit's findings with the output naming resolved, and the pairing for
    :class:`~gapcheck.backends.triton.TritonBackend`'s ``output_map`` (empty when the names agree or no pairing
    holds).

    ``audit`` is a :class:`~gapcheck.triton.audit_result.TritonAuditResult` (its ``onnx_outputs`` and ``served``);
    ``findings``: its findings as resolved so far (default: the audit's own); ``fp16``: the deployment computes in
    FP16, so an FP16 output pairs with the graph's FP32 one.
    """
    findings = list(audit.findings if findings is None else findings)
    served = audit.served.outputs if audit.served is not None else ()
    onnx_outputs = list(audit.onnx_outputs)
    if not served or not onnx_outputs:
        return findings, {}
    pairs = _pairing(onnx_outputs, served, output_map or {})
    renamed = {o: t for o, t in pairs.items() if o != t}
    if not renamed:
        return findings, {}
    by_name = {t.name: t for t in served}
    for o in onnx_outputs:
        t = by_name[pairs[o.name]]
        if not _same_type(o.data_type, t.data_type, fp16) or not compatible_shape(o.shape, t.shape):
            return findings, {}  # a real mismatch: the audit's findings stand
    kept = [f for f in findings if not (f.code in (_NAME_MISMATCH, _AUDIT_PAIRING)
                                        and str(f.subject.output or "").startswith("output "))]
    how = "as mapped" if output_map else "by position (same count, order, data types and shapes)"
    shown = ", ".join(f"{o}={t}" for o, t in renamed.items())
    kept.append(SERVED_OUTPUT_NAMES.finding(
        f"the deployment names its outputs its own way; paired {how}: {shown} (graph=served); their values are "
        "compared", where=audit.model, subject=Subject(endpoint=audit.model, group="output names"),
        evidence={"output_map": renamed, "how": "map" if output_map else "position"}))
    return kept, renamed
