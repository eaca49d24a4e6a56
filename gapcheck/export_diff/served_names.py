"""The deployment's own output names: served outputs paired with the graph's as the audit and nightly pair them.

gapcheck's export names outputs after the model (``logits``); the user's deployment names them its own way
(``b``, ``c``, ``a``) or lists them in another order. The pairing is :func:`gapcheck.triton.names.pair_tensors`
(the one triton-audit and nightly use): ``output_map`` (``{graph_name: served_name}``) first, then names, then what
is left when only one pairing fits (a unique fit by data type and shape; by position only among leftovers that all
share one data type and shape). A renamed pairing is reported as a warning that shows it, and the values compared;
a served output that holds another tensor then fails on its values. Graph outputs the deployment does not serve
are gaps here (``triton_name_mismatch``): export-diff was asked to compare the model's outputs with the
deployment's, and those cannot be (the audit alone calls them a warning: not exposing an output may be intended).
They do not stop the comparison of the outputs it does serve (:func:`not_served_outputs`,
:func:`blocks_comparison`): a deployment of ONet that serves only its probabilities is compared on them.
A real mismatch (a data type or a shape that differs) keeps the Triton audit's gap findings.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gapcheck.codes.export_diff import SERVED_OUTPUT_NAMES
from gapcheck.codes.triton import NAME_MISMATCH
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.triton.names import compatible_shape, pair_tensors, shown_names

_AUDIT_PAIRING = "triton_served_names"  # the audit's own note of the pairing: this module's warning replaces it


def _same_type(graph: str, served: str, fp16: bool) -> bool:
    """The same data type; with an FP16 deployment (:mod:`~gapcheck.export_diff.served_precision`), FP16 served for
    the export's FP32 too."""
    return graph == served or (fp16 and (graph, served) == ("TYPE_FP32", "TYPE_FP16"))


def _not_served(finding: Finding, names: tuple[str, ...], served: list[str]) -> Finding:
    """The audit's warning about a graph output the deployment does not serve, as the gap it is for a comparison."""
    name = finding.evidence.get("onnx")
    if finding.code != NAME_MISMATCH.code or name not in names or finding.severity is Severity.GAP:
        return finding
    message = (f"ONNX output {shown_names([name])} is not served by the deployment (it serves "
               f"{shown_names(served)}): its values cannot be compared with the model's")
    return Finding(finding.code, Severity.GAP, message, finding.where, dict(finding.evidence), finding.subject)


def served_output_names(audit: Any, output_map: Mapping[str, str] | None = None, *, fp16: bool = False,
                        findings: list[Finding] | None = None) -> tuple[list[Finding], dict[str, str]]:
    """The audit's findings with the output naming resolved, and the pairing for
    :class:`~gapcheck.backends.triton.TritonBackend`'s ``output_map`` (empty when the names agree).

    ``audit`` is a :class:`~gapcheck.triton.audit_result.TritonAuditResult` (its ``onnx_outputs`` and ``served``);
    ``findings``: its findings as resolved so far (default: the audit's own); ``fp16``: the deployment computes in
    FP16, so an FP16 output pairs with the graph's FP32 one. The map's names were checked by the audit (an unknown
    one is a UsageError there).
    """
    findings = list(audit.findings if findings is None else findings)
    served = list(audit.served.outputs) if audit.served is not None else []
    onnx_outputs = list(audit.onnx_outputs)
    if not served or not onnx_outputs:
        return findings, {}
    pairing = pair_tensors("output", onnx_outputs, served, output_map or {})
    if pairing.unpaired_graph:
        findings = [_not_served(f, pairing.unpaired_graph, [t.name for t in served]) for f in findings]
    renamed = pairing.renamed
    by_name, graph = {t.name: t for t in served}, {o.name: o for o in onnx_outputs}
    if not renamed or not all(_same_type(graph[g].data_type, by_name[s].data_type, fp16) and
                              compatible_shape(graph[g].shape, by_name[s].shape) for g, s in pairing.pairs.items()):
        return findings, {}  # the names agree, or a real mismatch: the audit's findings stand
    kept = [f for f in findings if not (f.code == _AUDIT_PAIRING and f.subject.output == "output names")]
    shown = ", ".join(f"{o}={t}" for o, t in renamed.items())
    kept.append(SERVED_OUTPUT_NAMES.finding(
        f"the deployment names its outputs its own way; paired {pairing.how}: {shown_names([shown], 1)} "
        "(graph=served); their values are compared", where=audit.model,
        subject=Subject(endpoint=audit.model, group="output names"),
        evidence={"output_map": renamed, "how": pairing.how}))
    return kept, renamed


def not_served_outputs(audit: Any, output_map: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The graph outputs no served output pairs with (the same pairing as :func:`served_output_names`): the ones
    :class:`~gapcheck.backends.triton.TritonBackend` is told it does not serve. Empty when the audit read no served
    outputs (a restricted API: nothing is known to be missing)."""
    served = list(audit.served.outputs) if audit.served is not None else []
    onnx_outputs = list(audit.onnx_outputs)
    if not served or not onnx_outputs:
        return ()
    return pair_tensors("output", onnx_outputs, served, output_map or {}).unpaired_graph


def blocks_comparison(finding: Finding, not_served: tuple[str, ...], graph_outputs: int) -> bool:
    """Whether a gap stops the deployment's outputs from being compared at all. A graph output the deployment does
    not serve does not, as long as it serves some other graph output: that one is still compared (the missing ones
    stay their own gaps). Any other gap (a data type, a shape, an input, a served output the graph lacks) does."""
    if not finding.is_gap:
        return False
    missing = (finding.code == NAME_MISMATCH.code and finding.evidence.get("served", "") is None
               and finding.evidence.get("onnx") in not_served)
    return not missing or len(not_served) >= graph_outputs
