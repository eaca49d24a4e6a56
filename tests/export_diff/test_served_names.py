"""A deployment that names its outputs its own way: paired as the audit and nightly pair them, values compared.

Unit cases on audit values, then a real Triton server serving an ONet-shaped model (and, slow, facenet-pytorch's
MTCNN ONet with its shipped weights) under the names its owner gave (b, c, a), in another order under other names
(prob, box, landmarks: paired by shape), the graph's own names in another order (paired by name, not position),
only some outputs (a gap, exit 1, not a backend failure), and a deployment whose first output really is the other
head.
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


def test_renamed_outputs_pair_by_shape_with_an_info():
    # an info, as triton-audit's and nightly's triton_served_names (the verification review: one pairing, two levels)
    findings, mapping = served_output_names(_audit(GRAPH, SERVED))
    assert mapping == {"0": "b", "1": "c", "2": "a"}
    assert [f.code for f in findings] == ["served_output_names"]
    assert findings[0].severity == Severity.INFO and "0=b" in findings[0].message


def test_outputs_of_other_shapes_in_another_order_pair_by_shape():  # review D1: ONet served as prob, box, landmarks
    served = [("prob", "TYPE_FP32", (None, 2)), ("box", "TYPE_FP32", (None, 4)), ("landmarks", "TYPE_FP32", (None, 10))]
    findings, mapping = served_output_names(_audit(GRAPH, served))
    assert mapping == {"0": "box", "1": "landmarks", "2": "prob"}
    assert "by data type and shape" in findings[-1].message


@pytest.mark.parametrize("served, renamed", [
    ([("aux_logits", "TYPE_FP32", (None, 10)), ("logits", "TYPE_FP32", (None, 10))], {}),  # the graph's names
    ([("aux", "TYPE_FP32", (None, 10)), ("logits", "TYPE_FP32", (None, 10))], {"aux_logits": "aux"}),  # one renamed
])
def test_served_names_equal_to_the_graphs_pair_by_name_not_position(served, renamed):  # review D0
    graph = [("logits", "TYPE_FP32", (None, 10)), ("aux_logits", "TYPE_FP32", (None, 10))]
    findings, mapping = served_output_names(_audit(graph, served))
    assert mapping == renamed  # the old position pairing gave {"logits": "aux", ...}: two false deployment_mismatch
    assert [f.code for f in findings] == (["served_output_names"] if renamed else [])


def test_a_graph_output_the_deployment_does_not_serve_is_a_gap():  # review D3: the audit's warning, a gap here
    missing = [Finding("triton_name_mismatch", Severity.WARNING, f"ONNX output '{n}' is not declared by the server",
                       subject=Subject(endpoint="x", module="onet", output=f"output {n}"), evidence={"onnx": n})
               for n in "01"]
    findings, mapping = served_output_names(_audit(GRAPH, [("2", "TYPE_FP32", (None, 2))], missing))
    assert mapping == {} and [f.severity for f in findings] == [Severity.GAP, Severity.GAP]
    assert "not served by the deployment (it serves '2')" in findings[0].message


@pytest.mark.parametrize("served", [
    [SERVED[0], ("c", "TYPE_FP16", (None, 10)), SERVED[2]],  # another data type
    [SERVED[1], SERVED[0], ("a", "TYPE_FP32", (None, 3))],  # a shape no graph output has
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


def _numbered(model: onnx.ModelProto) -> onnx.ModelProto:
    """The file's outputs renamed "0", "1", ... as gapcheck's export names a tuple's (TorchScript refuses such names)."""
    names = {o.name: str(i) for i, o in enumerate(model.graph.output)}
    for node in model.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    for output in model.graph.output:
        output.name = names[output.name]
    return model


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
    # review D1: other names, another order, each output its own shape (the owner's file names them as served)
    write_python_model(repo, "onet_shuffled", _config("onet_shuffled", [("prob", 2), ("box", 4), ("landmarks", 10)],
                                                      "3, 48, 48"),
                       {1: _owner_export(deployed.onet_like(), (1, 3, 48, 48), ["box", "landmarks", "prob"])})
    # review D3: only the third output served, under the graph's name
    write_python_model(repo, "onet_probonly", _config("onet_probonly", [("2", 2)], "3, 48, 48"),
                       {1: _numbered(_owner_export(deployed.onet_like(), (1, 3, 48, 48), ["a", "b", "c"]))})
    # the same, its input fed channel-swapped (a planted BGR deployment): the one output it serves is wrong
    write_python_model(repo, "onet_probonly_bgr", _config("onet_probonly_bgr", [("2", 2)], "3, 48, 48") +
                       'parameters { key: "channel_swap" value: { string_value: "1" } }\n',
                       {1: _numbered(_owner_export(deployed.onet_like(), (1, 3, 48, 48), ["a", "b", "c"]))})
    heads = deployed.two_heads()
    swapped = _owner_export(heads, (1, 6), ["q", "p"])  # q is the first head, p the second
    write_python_model(repo, "heads_swapped", _config("heads_swapped", [("p", 3), ("q", 3)], "6"), {1: swapped})
    # review D0: the graph's own names, listed in another order (each served under its name, values right)
    write_python_model(repo, "heads_reordered", _config("heads_reordered", [("1", 3), ("0", 3)], "6"),
                       {1: _numbered(_owner_export(heads, (1, 6), ["a", "b"]))})
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


def _cli(tmp_path, model: str, shape: str, served_model: str, url: str) -> tuple[int, dict]:
    import json

    from gapcheck.cli.app import main

    report = tmp_path / f"{served_model}.json"
    code = main(["export-diff", "--model", f"sample_models.deployed:{model}", "--input", f"x:{shape}:float32",
                 "--num-samples", "2", "--triton-url", url, "--triton-model", served_model, "--json", str(report),
                 "--no-cache"])
    return code, json.loads(report.read_text())


def test_cli_pairs_the_graphs_own_names_listed_in_another_order_by_name(server, tmp_path):
    """Review D0: outputs served under the graph's names in another order were paired by position: two false
    deployment_mismatch (exit 1) where triton-audit and nightly passed."""
    code, document = _cli(tmp_path, "two_heads", "1x6", "heads_reordered", server.url("grpc"))
    codes = [f["code"] for f in document["findings"]]
    assert code == 0 and "deployment_mismatch" not in codes and "served_output_names" not in codes, codes


def test_cli_pairs_outputs_of_other_shapes_served_in_another_order(server, tmp_path):
    """Review D1: ONet's [4], [10], [2] served as prob, box, landmarks: one pairing fits by shape."""
    code, document = _cli(tmp_path, "onet_like", "1x3x48x48", "onet_shuffled", server.url("http"))
    assert code == 0, document["findings"]
    (named,) = [f for f in document["findings"] if f["code"] == "served_output_names"]
    assert named["evidence"]["output_map"] == {"0": "box", "1": "landmarks", "2": "prob"}
    assert "triton_name_mismatch" not in [f["code"] for f in document["findings"]]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_cli_a_deployment_serving_some_outputs_is_a_gap_not_a_backend_failure(server, tmp_path, protocol):
    """Review D3: only output '2' served: export-diff stopped with exit 3 ("returned no output named '0'"); the
    outputs it lacks are gaps (exit 1), as nightly's golden_output_missing. And the output it serves is compared
    (it was skipped with the whole deployment, ``deployment_not_compared``)."""
    code, document = _cli(tmp_path, "onet_like", "1x3x48x48", "onet_probonly", server.url(protocol))
    assert code == 1, document["headline"]
    missing = [f for f in document["findings"] if f["code"] == "triton_name_mismatch"]
    assert {f["evidence"]["onnx"] for f in missing} == {"0", "1"} and all(f["severity"] == "gap" for f in missing)
    assert "not served by the deployment (it serves '2')" in missing[0]["message"]
    codes = [f["code"] for f in document["findings"]]
    assert "deployment_not_compared" not in codes and "deployment_mismatch" not in codes, codes
    served = [o for o in document["outputs"] if o["backend"] == f"triton-{protocol}"]
    assert [(o["name"], o["status"]) for o in served] == [("2", "pass")], document["outputs"]


def test_cli_the_one_output_served_is_still_a_gap_when_its_values_differ(server, tmp_path):
    """Served '2' only, from channel-swapped inputs: the not-served outputs are gaps and '2' fails on its values."""
    code, document = _cli(tmp_path, "onet_like", "1x3x48x48", "onet_probonly_bgr", server.url("grpc"))
    assert code == 1, document["headline"]
    mismatched = [f for f in document["findings"] if f["code"] == "deployment_mismatch"]
    assert mismatched and all("2" in (f["subject"].get("output") or f["message"]) for f in mismatched), mismatched
    served = [o for o in document["outputs"] if o["backend"] == "triton-grpc"]
    assert [(o["name"], o["status"]) for o in served] == [("2", "fail")], document["outputs"]


def test_triton_audit_pairs_outputs_of_other_shapes_served_in_another_order(server, tmp_path, capsys):
    """Review D1 in triton-audit: three triton_name_mismatch gaps and a suggested map that did not fit
    ('0=prob,1=box,2=landmarks'); now paired by shape, said as info."""
    import json

    from gapcheck.cli.app import main

    graph = tmp_path / "onet.onnx"
    onnx.save_model(_numbered(_owner_export(deployed.onet_like(), (1, 3, 48, 48), ["a", "b", "c"])), str(graph))
    report = tmp_path / "audit.json"
    code = main(["triton-audit", "--onnx", str(graph), "--triton-url", server.url("grpc"), "--triton-model",
                 "onet_shuffled", "--json", str(report)])
    capsys.readouterr()
    findings = json.loads(report.read_text())["findings"]
    assert code == 0, findings
    assert "triton_name_mismatch" not in [f["code"] for f in findings]
    (named,) = [f for f in findings if f["code"] == "triton_served_names" and f["evidence"]["pairs"].get("0")]
    assert named["evidence"]["pairs"] == {"0": "box", "1": "landmarks", "2": "prob"}


def test_only_not_served_outputs_do_not_stop_the_comparison():
    from gapcheck.export_diff.served_names import blocks_comparison, not_served_outputs

    missing = [Finding("triton_name_mismatch", Severity.WARNING, f"ONNX output '{n}' is not declared by the server",
                       subject=Subject(endpoint="x", module="onet", output=f"output {n}"),
                       evidence={"onnx": n, "served": None}) for n in "01"]
    audit = _audit(GRAPH, [("2", "TYPE_FP32", (None, 2))], missing)
    findings, _ = served_output_names(audit)
    not_served = not_served_outputs(audit)
    assert not_served == ("0", "1")
    assert not any(blocks_comparison(f, not_served, len(GRAPH)) for f in findings)  # '2' is compared
    assert all(blocks_comparison(f, ("0", "1", "2"), len(GRAPH)) for f in findings)  # nothing served: not compared
    assert blocks_comparison(_name_gap("b"), not_served, len(GRAPH))  # a served output the graph lacks still blocks
