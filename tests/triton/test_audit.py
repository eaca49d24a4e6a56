"""triton-audit against a real server: one planted deployment fault per test, both protocols."""
from __future__ import annotations

import pytest

from gapcheck.errors import EndpointError
from gapcheck.findings import Severity
from gapcheck.triton import audit
from gapcheck.triton.audit import audit_deployment
from gapcheck.triton.client import TritonEndpoint
from gapcheck.triton.local_server import free_ports


def codes(result, severity=Severity.GAP):
    return sorted({f.code for f in result.findings if f.severity is severity})


def test_matching_deployment_passes(triton, protocol):
    result = audit_deployment(triton.endpoint(protocol), "tiny", onnx_model=triton.onnx_model)
    assert result.verdict == "pass" and bool(result)
    assert result.served.versions == ("1",) and result.served.max_batch_size == 8
    assert [t.name for t in result.served.inputs] == ["x"]
    assert result.server_version == "2.51.0"
    # The test server runs the graph through a Python-backend model, which the audit names but does not fail.
    assert codes(result, Severity.WARNING) == [audit.PLATFORM]


def test_fp16_declared_input_is_a_dtype_gap(triton, protocol):
    result = audit_deployment(triton.endpoint(protocol), "tiny_fp16", onnx_model=triton.onnx_model)
    assert result.verdict == "gap"
    (finding,) = [f for f in result.findings if f.code == audit.DTYPE_MISMATCH]
    assert finding.evidence["served"] == "TYPE_FP16" and finding.evidence["onnx"] == "TYPE_FP32"
    assert "'x'" in finding.where


def test_requested_version_not_served_is_stale(triton, protocol):
    result = audit_deployment(triton.endpoint(protocol), "tiny_versions",
                              onnx_model=triton.onnx_model, version=2)
    (finding,) = [f for f in result.findings if f.code == audit.VERSION_STALE]
    assert finding.severity is Severity.GAP
    assert finding.evidence == {"requested": "2", "served": ["1"]}
    assert result.served.version == "1"  # the rest of the audit looks at what is actually served


def test_pinned_version_policy_is_named_without_a_requested_version(triton):
    result = audit_deployment(triton.endpoint("http"), "tiny_versions", onnx_model=triton.onnx_model)
    (finding,) = [f for f in result.findings if f.code == audit.VERSION_STALE]
    assert finding.severity is Severity.WARNING and finding.evidence["version_policy"] == ["1"]


def test_missing_batch_axis_is_a_batch_gap(triton, protocol):
    result = audit_deployment(triton.endpoint(protocol), "tiny_nobatch", onnx_model=triton.onnx_model)
    found = [f for f in result.findings if f.code == audit.BATCH_MISMATCH]
    assert {f.where.split()[-2] for f in found} == {"input", "output"}
    assert found[0].evidence["served"] == "[3, 8, 8]" and found[0].evidence["onnx"] == "[?, 3, 8, 8]"


def test_renamed_input_is_paired_by_the_audit(triton, protocol):
    """Once a gap (a false alarm on every INPUT__0 deployment): now paired, said as info (test_served_input_names)."""
    result = audit_deployment(triton.endpoint(protocol), "tiny_renamed", onnx_model=triton.onnx_model)
    assert not [f for f in result.findings if f.code == audit.NAME_MISMATCH]
    assert result.input_map == {"x": "input"}


def test_model_that_failed_to_load_is_not_ready(triton, protocol):
    result = audit_deployment(triton.endpoint(protocol), "broken", onnx_model=triton.onnx_model)
    (finding,) = result.findings
    assert finding.code == audit.NOT_READY and finding.is_gap
    assert finding.evidence["served"] == "UNAVAILABLE" and "planted load failure" in finding.evidence["reason"]
    assert result.served is None


def test_unknown_model_is_a_usage_error_not_a_gap(triton):
    from gapcheck.triton.endpoint import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="'no_such_model' is not in the repository"):
        audit_deployment(triton.endpoint("grpc"), "no_such_model", onnx_model=triton.onnx_model)


def test_server_down_raises_endpoint_error_fast(tiny_onnx, protocol):
    (port,) = free_ports(1)
    with pytest.raises(EndpointError, match="after 2 attempts"):
        audit_deployment(TritonEndpoint(f"127.0.0.1:{port}", protocol, retries=1, timeout_s=2), "tiny",
                         onnx_model=tiny_onnx)


def test_torch_dtype_is_carried_into_dtype_evidence(triton):
    import torch

    module = torch.nn.Linear(2, 2).half()
    result = audit_deployment(triton.endpoint("http"), "tiny_fp16", onnx_model=triton.onnx_model,
                              torch_module=module)
    assert result.torch_dtype == "float16"
    (finding,) = [f for f in result.findings if f.code == audit.DTYPE_MISMATCH]
    assert finding.evidence["torch"] == "float16"



def test_a_server_listing_thousands_of_unknown_tensors_is_named_a_hundred_times_then_counted():
    # The verification review: a server listing 200,000 tensors the graph lacks made 200,000 findings (a 100 MB JSON).
    from gapcheck.triton.names import Pairing

    auditor = audit._Auditor("grpc://h:1", "m", "m @ grpc://h:1", None)
    served = tuple(f"extra_{i}" for i in range(250))
    auditor._unpaired("output", Pairing("output", {"y": "y"}, problem="not in the graph", unpaired_served=served))
    assert len(auditor.findings) == audit.MAX_NAMED_TENSORS + 1
    last = auditor.findings[-1]
    assert last.message.startswith("150 more output(s) unpaired like these")
    assert last.evidence["unpaired_served"] == 250
