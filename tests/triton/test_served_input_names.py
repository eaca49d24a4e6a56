"""Deployments that name their tensors their own way (INPUT__0, images): paired, not a gap (issue 23 follow-up).

Unit cases of :func:`gapcheck.triton.names.pair_tensors`, then the real Triton server of conftest.py: the audit,
``triton-audit`` and ``export-diff`` on ``tiny_renamed`` (input ``input``) and ``tiny_torchnames`` (``INPUT__0`` /
``OUTPUT__0``), the explicit maps and their validation, and a misspelt model name (exit 2, not a gap).
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gapcheck.cli.app import main
from gapcheck.errors import UsageError
from gapcheck.triton import audit
from gapcheck.triton.audit import ServedTensor, audit_deployment
from gapcheck.triton.endpoint import ModelNotFoundError
from gapcheck.triton.names import pair_tensors
from tests.triton.conftest import ACCESS_HEADER, ACCESS_TOKEN


def _t(name, data_type="TYPE_FP32", shape=(None, 3, 8, 8)):
    return SimpleNamespace(name=name, data_type=data_type, shape=shape)


IDS, MASK = _t("input_ids", "TYPE_INT64", (None, 16)), _t("attention_mask", "TYPE_INT64", (None, 16))


def test_one_renamed_input_is_paired():
    pairing = pair_tensors("input", [_t("x")], [_t("INPUT__0")])
    assert pairing.pairs == {"x": "INPUT__0"} and pairing.problem is None


def test_inputs_that_each_fit_one_served_input_are_paired_whatever_the_order():
    graph = [_t("image"), _t("scale", "TYPE_FP32", (None, 2))]
    served = [_t("INPUT__1", "TYPE_FP32", (None, 2)), _t("INPUT__0")]
    assert pair_tensors("input", graph, served).pairs == {"image": "INPUT__0", "scale": "INPUT__1"}


def test_ambiguous_inputs_need_the_map_and_the_message_says_so():
    served = [_t("INPUT__0", "TYPE_INT64", (None, 16)), _t("INPUT__1", "TYPE_INT64", (None, 16))]
    pairing = pair_tensors("input", [IDS, MASK], served)
    assert pairing.problem is not None and "--triton-input-map" in pairing.problem
    assert "input_ids" in pairing.problem and "INPUT__0" in pairing.problem
    mapped = pair_tensors("input", [IDS, MASK], served, {"input_ids": "INPUT__1", "attention_mask": "INPUT__0"})
    assert mapped.pairs == {"input_ids": "INPUT__1", "attention_mask": "INPUT__0"} and mapped.problem is None


def test_another_count_is_a_problem_naming_both_sides():
    pairing = pair_tensors("input", [IDS, MASK], [_t("INPUT__0", "TYPE_INT64", (None, 16))])
    assert pairing.problem is not None and "differ in number" in pairing.problem
    assert pairing.unpaired_graph == ("input_ids", "attention_mask")


def test_map_names_unknown_on_either_side_are_usage_errors():
    with pytest.raises(UsageError, match="the graph's inputs are 'x'"):
        pair_tensors("input", [_t("x")], [_t("images")], {"nope": "images"})
    with pytest.raises(UsageError, match="the served ones 'images'"):
        pair_tensors("input", [_t("x")], [_t("images")], {"x": "imgs"})


def test_ambiguous_inputs_stay_a_name_gap_in_the_audit():
    auditor = audit._Auditor("grpc://h:1", "bert", "bert @ grpc://h:1", 8)
    served = (_t("INPUT__0", "TYPE_INT64", (None, 16)), _t("INPUT__1", "TYPE_INT64", (None, 16)))
    ios = [SimpleNamespace(name=t.name, triton_type=t.data_type, shape=t.shape) for t in (IDS, MASK)]
    assert auditor.names("input", ios, served) == []
    gaps = [f for f in auditor.findings if f.is_gap]
    assert gaps and all(f.code == audit.NAME_MISMATCH for f in gaps)
    assert all("--triton-input-map" in f.message for f in gaps)


def test_a_renamed_input_of_another_shape_stays_a_shape_gap_naming_both_sides():
    auditor = audit._Auditor("grpc://h:1", "m", "m @ grpc://h:1", 8)
    graph = [SimpleNamespace(name="x", triton_type="TYPE_FP32", shape=(None, 3, 8, 8))]
    served = ServedTensor("images", "TYPE_FP32", (3, 16, 16), (None, 3, 16, 16))
    ((o, t),) = auditor.names("input", graph, (served,))
    auditor.shape("input", o, t)
    gaps = [f for f in auditor.findings if f.is_gap]  # axes 2 and 3
    assert len(gaps) == 2 and all(f.code == audit.SHAPE_MISMATCH for f in gaps)
    assert all("'images' (the graph's 'x')" in f.message for f in gaps)


# --- against the real server ------------------------------------------------------------------------------------

def test_renamed_input_is_paired_not_a_gap(triton, protocol):
    result = audit_deployment(triton.endpoint(protocol), "tiny_renamed", onnx_model=triton.onnx_model)
    assert not [f for f in result.findings if f.is_gap], [f.message for f in result.findings]
    (info,) = [f for f in result.findings if f.code == "triton_served_names"]
    assert info.evidence["pairs"] == {"x": "input"} and result.input_map == {"x": "input"}


def test_triton_audit_passes_a_deployment_with_torchscript_names(triton, tiny_onnx_path, tmp_path, capsys):
    report = tmp_path / "a.json"
    code = main(["triton-audit", "--onnx", str(tiny_onnx_path), "--triton-url", triton.url("grpc"),
                 "--triton-model", "tiny_torchnames", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "x=INPUT__0" in out and "y=OUTPUT__0" in out
    codes = [f["code"] for f in json.loads(report.read_text())["findings"]]
    assert "triton_name_mismatch" not in codes and codes.count("triton_served_names") == 2


@pytest.mark.parametrize("bad, words", [
    ("x=nope", "the served ones 'INPUT__0'"),  # a served name the deployment lacks
    ("nope=INPUT__0", "the graph's inputs are 'x'"),  # a graph name the file lacks
    ("x=IN\x1bPUT__0", "control character"),
    ("x", "graph_name=served_name"),
])
def test_input_map_is_checked_and_a_bad_one_is_exit_2(triton, tiny_onnx_path, capsys, bad, words):
    code = main(["triton-audit", "--onnx", str(tiny_onnx_path), "--triton-url", triton.url("http"),
                 "--triton-model", "tiny_torchnames", "--triton-input-map", bad])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "\x1b" not in err


def test_export_diff_compares_a_deployment_with_its_own_names(triton, protocol, tiny_onnx_path, tmp_path, capsys):
    from tests.triton.test_export_diff_parity import ARGS

    report = tmp_path / "r.json"
    code = main([*ARGS, "--onnx", str(tiny_onnx_path), "--triton-url", triton.url(protocol), "--protocol", protocol,
                 "--triton-model", "tiny_torchnames", "--json", str(report)])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    doc = json.loads(report.read_text())
    assert {o["backend"] for o in doc["outputs"]} == {"onnxruntime", f"triton-{protocol}"}
    assert all(o["status"] == "pass" for o in doc["outputs"])
    for record in doc["inputs"]:  # what the server was sent is what torch was fed
        assert len(set(record["sha256"].values())) == 1 and f"triton-{protocol}" in record["sha256"]


def test_export_diff_takes_the_explicit_input_map(triton, tiny_onnx_path, tmp_path, capsys):
    from tests.triton.test_export_diff_parity import ARGS

    code = main([*ARGS, "--onnx", str(tiny_onnx_path), "--triton-url", triton.url("grpc"),
                 "--triton-model", "tiny_torchnames", "--triton-input-map", "x=INPUT__0",
                 "--triton-output-map", "y=OUTPUT__0"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "as mapped" in out


@pytest.mark.parametrize("protocol_", ["http", "grpc"])
def test_misspelt_model_is_exit_2_listing_the_served_ones(triton, tiny_onnx_path, capsys, protocol_):
    code = main(["triton-audit", "--onnx", str(tiny_onnx_path), "--triton-url", triton.url(protocol_),
                 "--triton-model", "tiny_renamd"])
    err = capsys.readouterr().err
    assert code == 2
    assert "'tiny_renamd' is not in the repository" in err and "'tiny_renamed'" in err and "state unknown" not in err


def test_misspelt_model_is_exit_2_when_the_repository_index_is_restricted(hardened_triton, tiny_onnx_path, protocol):
    from gapcheck.triton.client import TritonEndpoint

    endpoint = hardened_triton.url(protocol)
    with pytest.raises(ModelNotFoundError, match="'tinny' is not on .*unknown model.*index is restricted"):
        audit_deployment(TritonEndpoint(endpoint, protocol), "tinny", onnx_model=tiny_onnx_path)
    with pytest.raises(ModelNotFoundError, match="'tinny' is not in the repository"):  # with the token: the index
        audit_deployment(TritonEndpoint(endpoint, protocol, headers={ACCESS_HEADER: ACCESS_TOKEN}), "tinny",
                         onnx_model=tiny_onnx_path)


def test_export_diff_junit_fails_on_a_triton_config_gap(triton, tiny_onnx_path, tmp_path, capsys):
    """Exit 1 on a triton_* finding alone used to write a JUnit file with 0 failures (item 3)."""
    import xml.etree.ElementTree as ET

    from tests.triton.test_export_diff_parity import ARGS

    junit = tmp_path / "r.xml"
    code = main([*ARGS, "--onnx", str(tiny_onnx_path), "--triton-url", triton.url("grpc"),
                 "--triton-model", "tiny_nobatch", "--junit", str(junit)])
    capsys.readouterr()
    assert code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    failed = [c.get("classname") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert int(suite.get("failures")) >= 1 and "export_diff.findings.triton_batch_mismatch" in failed


@pytest.mark.parametrize("status, rejected", [("400", True), ("StatusCode.INVALID_ARGUMENT", True), ("404", True),
                                              ("StatusCode.NOT_FOUND", True), ("500", False), ("503", False),
                                              ("StatusCode.UNAVAILABLE", False), ("StatusCode.DEADLINE_EXCEEDED", False)])
def test_only_a_request_the_server_calls_wrong_is_rejected(status, rejected):
    """4xx / INVALID_ARGUMENT is the deployment's answer (a gap for nightly); 5xx, unavailable, timeouts stay outages."""
    from tritonclient.utils import InferenceServerException

    from gapcheck.errors import EndpointError
    from gapcheck.triton.client import TritonEndpoint, connect
    from gapcheck.triton.endpoint import RequestRejectedError

    def fail():
        raise InferenceServerException(msg="unexpected inference input 'x'", status=status)

    with connect(TritonEndpoint("http://127.0.0.1:9", "http", retries=0), backoff_s=0.0) as conn, \
            pytest.raises(EndpointError) as caught:
        conn.call("inference on model 'm'", fail)
    assert isinstance(caught.value, RequestRejectedError) is rejected
    if rejected:
        assert caught.value.reason == "unexpected inference input 'x'" and caught.value.status == status


# --- outputs paired like inputs (review D1): a unique fit first, position only among same-shaped leftovers ---------

ONET = [_t("0", shape=(None, 4)), _t("1", shape=(None, 10)), _t("2", shape=(None, 2))]


def test_outputs_of_other_shapes_in_another_order_are_paired_by_shape():
    served = [_t("prob", shape=(None, 2)), _t("box", shape=(None, 4)), _t("landmarks", shape=(None, 10))]
    pairing = pair_tensors("output", ONET, served)
    assert pairing.pairs == {"0": "box", "1": "landmarks", "2": "prob"} and pairing.problem is None
    assert "data type and shape" in pairing.how


def test_same_shaped_outputs_left_over_are_paired_by_position_and_said_so():
    graph = [_t("0", shape=(None, 10)), _t("1", shape=(None, 10)), _t("2", shape=(None, 2))]
    served = [_t("p", shape=(None, 2)), _t("OUTPUT__0", shape=(None, 10)), _t("OUTPUT__1", shape=(None, 10))]
    pairing = pair_tensors("output", graph, served)
    assert pairing.pairs == {"2": "p", "0": "OUTPUT__0", "1": "OUTPUT__1"}
    assert "by position" in pairing.how and "data type and shape" in pairing.how


def test_outputs_with_the_graphs_names_in_another_order_are_paired_by_name():  # review D0
    graph = [_t("logits", shape=(None, 10)), _t("aux_logits", shape=(None, 10))]
    pairing = pair_tensors("output", graph, [_t("aux_logits", shape=(None, 10)), _t("logits", shape=(None, 10))])
    assert pairing.pairs == {"logits": "logits", "aux_logits": "aux_logits"} and not pairing.renamed


def test_the_hints_example_is_a_pairing_that_fits():
    """The example was the positional one whatever the shapes ('0=prob,1=box,2=landmarks' for ONet): now one that
    fits, or none."""
    graph = [_t("p", shape=(None, 4)), _t("q", shape=(None, 4)), _t("r", shape=(None, 10)), _t("t", shape=(None, 10))]
    served = [_t("A", shape=(None, 10)), _t("B", shape=(None, 4)), _t("C", shape=(None, 10)), _t("D", shape=(None, 4))]
    pairing = pair_tensors("output", graph, served)
    assert pairing.problem is not None and "e.g. 'p=B,q=D,r=A,t=C'" in pairing.problem
    shapes = {t.name: t.shape for t in graph + served}
    example = pairing.problem.split("e.g. '")[1].split("'")[0]
    assert all(shapes[g] == shapes[s] for g, s in (pair.split("=") for pair in example.split(",")))
    none_fits = pair_tensors("output", ONET[:2], [_t("a", shape=(None, 3)), _t("b", shape=(None, 7))])
    assert none_fits.problem is not None and "no pairing fits" in none_fits.problem and "e.g." not in none_fits.problem


def test_a_graph_output_not_served_says_so():  # review D3: the audit's warning names what is served
    pairing = pair_tensors("output", ONET, [_t("2", shape=(None, 2))])
    assert pairing.unpaired_graph == ("0", "1") and "serves no other output" in (pairing.problem or "")


def test_names_that_are_not_plain_ascii_are_shown_escaped():
    """'INPUТ__0' (a Cyrillic Te) beside 'INPUT__0' read the same in every pairing message; now escaped."""
    from gapcheck.triton.names import shown_names

    assert shown_names(["INPUT__0", "INPU\u0422__0"]) == "'INPUT__0', 'INPU\\u0422__0'"
    with pytest.raises(UsageError) as caught:  # the user's map names the ASCII one; the server serves the lookalike
        pair_tensors("input", [_t("x")], [_t("INPU\u0422__0")], {"x": "INPUT__0"})
    message = caught.value.message
    assert "'INPUT__0'" in message and "'INPU\\u0422__0'" in message and "\u0422" not in message
    pairing = pair_tensors("input", [IDS, MASK], [_t("input_id\u0455", "TYPE_INT64", (None, 16))])  # a Cyrillic dze
    assert pairing.problem is not None and "'input_id\\u0455'" in pairing.problem
