"""A deployment that names its outputs its own way: paired by position (or an explicit map), values compared.

Unit cases on audit values, then a real Triton server serving an ONet-shaped model (and, slow, facenet-pytorch's
MTCNN ONet with its shipped weights) under the names its owner gave (b, c, a), and a deployment whose first output
really is the other head.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
import torch

from gapcheck.errors import UsageError
from gapcheck.export_diff.served_names import served_output_names
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.triton.audit_result import ServedTensor, TensorSide
from sample_models import deployed


def _audit(onnx_outputs, served_outputs, findings=()):
    served = SimpleNamespace(outputs=tuple(ServedTensor(n, t, s, s) for n, t, s in served_outputs))
    return SimpleNamespace(findings=tuple(findings), served=served, model="onet",
                           onnx_outputs=tuple(TensorSide(n, t, s) for n, t, s in onnx_outputs))


def _name_gap(name):
    return Finding("triton_name_mismatch", Severity.GAP, f"served output '{name}' does not exist in the ONNX graph",
                   subject=Subject(endpoint="x", module="onet", output=f"output {name}"))


GRAPH = [("0", "TYPE_FP32", (None, 4)), ("1", "TYPE_FP32", (None, 10)), ("2", "TYPE_FP32", (None, 2))]
SERVED = [("b", "TYPE_FP32", (None, 4)), ("c", "TYPE_FP32", (None, 10)), ("a", "TYPE_FP32", (None, 2))]


def test_renamed_outputs_pair_by_position_with_a_warning():
    findings, mapping = served_output_names(_audit(GRAPH, SERVED, [_name_gap(n) for n in "bca"]))
    assert mapping == {"0": "b", "1": "c", "2": "a"}
    assert [f.code for f in findings] == ["served_output_names"]
    assert findings[0].severity == Severity.WARNING and "0=b" in findings[0].message


@pytest.mark.parametrize("served", [
    SERVED[:2],  # another count
    [SERVED[0], ("c", "TYPE_FP16", (None, 10)), SERVED[2]],  # another data type
    [SERVED[1], SERVED[0], SERVED[2]],  # shapes in another order
])
def test_a_real_mismatch_keeps_the_audit_gaps(served):
    gaps = [_name_gap(n) for n in "bca"]
    findings, mapping = served_output_names(_audit(GRAPH, served, gaps))
    assert mapping == {} and findings == gaps


def test_explicit_map_and_its_errors():
    findings, mapping = served_output_names(_audit(GRAPH, SERVED), {"0": "b", "1": "c", "2": "a"})
    assert mapping == {"0": "b", "1": "c", "2": "a"} and "as mapped" in findings[-1].message
    _, mapping = served_output_names(_audit(GRAPH, SERVED), {"0": "c", "1": "b", "2": "a"})  # shapes disagree
    assert mapping == {}
    with pytest.raises(UsageError):
        served_output_names(_audit(GRAPH, SERVED), {"0": "nope"})


# --- against a real Triton server -------------------------------------------------------------------------------

def _config(name: str, outputs: list[tuple[str, int]], input_dims: str) -> str:
    listed = ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ {d} ] }}' for n, d in outputs)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
            f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {input_dims} ] }} ]\noutput [ {listed} ]\n'
            'instance_group [ { kind: KIND_CPU count: 1 } ]\n')


def _owner_export(module, shape, names) -> onnx.ModelProto:
    """The file the deployment's owner exported, with the output names they chose."""
    return deployed.export(module, (torch.zeros(*shape),), ["x"], names, dynamo=False,
                           dynamic_axes={"x": {0: "batch"}, **{n: {0: "batch"} for n in names}})


@pytest.fixture(scope="module", params=["in-code"])
def server(tmp_path_factory, request):
    from gapcheck.triton.local_server import LocalTritonServer
    from tests.triton.conftest import write_python_model

    repo = tmp_path_factory.mktemp("served_names_repo")
    write_python_model(repo, "onet_like", _config("onet_like", [("b", 4), ("c", 10), ("a", 2)], "3, 48, 48"),
                       {1: _owner_export(deployed.onet_like(), (1, 3, 48, 48), ["b", "c", "a"])})
    if request.param == "real":
        write_python_model(repo, "onet", _config("onet", [("b", 4), ("c", 10), ("a", 2)], "3, 48, 48"),
                           {1: _owner_export(deployed.mtcnn_onet(), (1, 3, 48, 48), ["b", "c", "a"])})
    heads = deployed.two_heads()
    swapped = _owner_export(heads, (1, 6), ["q", "p"])  # q is the first head, p the second
    write_python_model(repo, "heads_swapped", _config("heads_swapped", [("p", 3), ("q", 3)], "6"), {1: swapped})
    triton = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("served_names_work"))
    with triton.running(timeout_s=90):
        yield triton


def _compare(server, protocol, model_name, module, shape, output_map=None):
    from gapcheck.backends.triton import TritonBackend
    from gapcheck.export_diff.runner import ExportOptions, export_diff
    from gapcheck.groups import ExportSpec
    from gapcheck.triton.audit import audit_deployment
    from gapcheck.triton.client import TritonEndpoint

    endpoint = TritonEndpoint(server.url(protocol), protocol)
    samples = [{"x": np.random.default_rng(s).standard_normal(shape).astype(np.float32)} for s in range(2)]
    exported, _ = ExportSpec(exporter="dynamo").obtain(module, samples[0])
    audit = audit_deployment(endpoint, model_name, onnx_model=exported.model, torch_module=module)
    findings, mapping = served_output_names(audit, output_map)
    with TritonBackend(endpoint, model_name, output_map=mapping) as backend:
        result = export_diff(module, samples, export=ExportOptions(exported=exported), deployed=[backend])
    return findings, mapping, result


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_onet_served_under_its_own_names_passes(server, protocol):
    findings, mapping, result = _compare(server, protocol, "onet_like", deployed.onet_like(), (1, 3, 48, 48))
    assert mapping == {"0": "b", "1": "c", "2": "a"}
    assert not [f for f in findings if f.is_gap], [f.message for f in findings]
    assert result.verdict == "pass", [f.message for f in result.findings if f.is_gap]
    served = [o for o in result.outputs if o.backend == f"triton-{protocol}"]
    assert len(served) == 3 and all(o.status == "pass" for o in served)


@pytest.mark.slow
@pytest.mark.parametrize("server", ["real"], indirect=True)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_real_mtcnn_onet_served_under_its_own_names_passes(server, protocol):
    findings, mapping, result = _compare(server, protocol, "onet", deployed.mtcnn_onet(), (1, 3, 48, 48))
    assert mapping == {"0": "b", "1": "c", "2": "a"}
    assert not [f for f in findings if f.is_gap], [f.message for f in findings]
    assert result.verdict == "pass", [f.message for f in result.findings if f.is_gap]
    served = [o for o in result.outputs if o.backend == f"triton-{protocol}"]
    assert len(served) == 3 and all(o.status == "pass" for o in served)


def test_served_output_that_is_another_tensor_is_a_gap(server):
    findings, mapping, result = _compare(server, "grpc", "heads_swapped", deployed.two_heads(), (1, 6))
    assert mapping == {"0": "p", "1": "q"}  # count, order, shapes and types agree: paired by position
    codes = [f.code for f in result.findings if f.is_gap]
    assert "deployment_mismatch" in codes, codes


def test_cli_pairs_served_names_and_honours_the_output_map(server, tmp_path):
    """Through the one CLI path: export-diff --triton-url passes on a deployment with its own names (a warning says
    how they were paired), and --triton-output-map pairs the swapped heads the user names."""
    import json

    from gapcheck.cli.app import main

    report = tmp_path / "r.json"
    code = main(["export-diff", "--model", "sample_models.deployed:onet_like", "--input", "x:1x3x48x48:float32",
                 "--num-samples", "2", "--triton-url", server.url("http"), "--triton-model", "onet_like",
                 "--json", str(report), "--no-cache"])
    document = json.loads(report.read_text())
    assert code == 0, document["headline"]
    assert "served_output_names" in [f["code"] for f in document["findings"]]
    code = main(["export-diff", "--model", "sample_models.deployed:two_heads", "--input", "x:1x6:float32",
                 "--num-samples", "2", "--triton-url", server.url("grpc"), "--triton-model", "heads_swapped",
                 "--triton-output-map", "0=q,1=p", "--json", str(report), "--no-cache"])
    document = json.loads(report.read_text())
    assert code == 0, document["headline"]
    found = [f for f in document["findings"] if f["code"] == "served_output_names"]
    assert found and found[0]["evidence"]["output_map"] == {"0": "q", "1": "p"}
