"""Third attacker pass: a server whose model config declares very many tensors (a hostile or broken deployment)."""
from __future__ import annotations

from gapcheck.findings import Finding, Severity, Subject
from gapcheck.triton.audit_result import ServedModel, ServedTensor, TritonAuditResult


class _CountingFinding:
    """A finding that counts how often its subject is read: the status column must look each finding up once."""

    reads = 0

    def __init__(self, finding: Finding) -> None:
        self._finding = finding

    @property
    def subject(self) -> Subject:
        _CountingFinding.reads += 1
        return self._finding.subject

    def __getattr__(self, name: str):
        return getattr(self._finding, name)


def test_the_tensor_table_reads_each_finding_once_however_many_tensors_the_server_declares():
    # 100k declared outputs made triton-audit run for hours: every row scanned every finding (quadratic)
    n = 3000
    outputs = tuple(ServedTensor(f"o{i}", "TYPE_FP32", (5,), (None, 5)) for i in range(n))
    findings = [Finding(code="triton_extra_output", severity=Severity.GAP if i % 2 else Severity.WARNING,
                        message="extra", subject=Subject(output=f"output o{i}")) for i in range(n)]
    counted = tuple(_CountingFinding(f) for f in findings)
    result = TritonAuditResult(endpoint="http://h:1", protocol="http", model="m", requested_version=None,
                               server_name="triton", server_version="2", model_state="READY",
                               served=ServedModel("m", "1", ("1",), "onnxruntime_onnx", "onnxruntime", 8, (), outputs),
                               findings=counted)  # type: ignore[arg-type]
    _CountingFinding.reads = 0
    rows = result.tensor_rows()
    assert len(rows) == n and _CountingFinding.reads <= 2 * n
    assert rows[1][-1] == "gap: triton_extra_output" and rows[0][-1] == "warning: triton_extra_output"
