"""nightly on deployments that name their tensors their own way, and on a server that refuses the request as wrong.

A real Triton server (loopback) serves the golden bundle's model three ways: under the names an Ultralytics-style
deployment uses (``images`` / ``logits``), under PyTorch-backend names (``INPUT__0`` / ``OUTPUT__0``), and with dims
the golden inputs do not have (the server answers HTTP 400 / gRPC INVALID_ARGUMENT). Renamed tensors are paired and
compared (exit 0, said as info); a request the server calls wrong is a deployment gap quoting its reason (exit 1),
never an unreachable endpoint (exit 3).
"""
from __future__ import annotations

import onnx
import pytest

from gapcheck.cli.app import main
from gapcheck.nightly.config import EndpointSpec
from gapcheck.nightly.probe import _rejected
from gapcheck.triton.endpoint import RequestRejectedError
from tests.nightly.nights import night


def _config(name: str, graph: onnx.ModelProto, inputs: list[str], outputs: list[str], input_dims: str = "") -> str:
    def entries(values, names, dims_override=""):
        parts = []
        for value, served in zip(values, names, strict=True):
            dims = dims_override or ", ".join(str(d.dim_value) for d in value.type.tensor_type.shape.dim[1:])
            parts.append(f'{{ name: "{served}" data_type: TYPE_FP32 dims: [ {dims} ] }}')
        return ", ".join(parts)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
            f"input [ {entries(graph.graph.input, inputs, input_dims)} ]\n"
            f"output [ {entries(graph.graph.output, outputs)} ]\ninstance_group [ {{ kind: KIND_CPU count: 1 }} ]\n")


@pytest.fixture(scope="module")
def renamed(golden_onnx: onnx.ModelProto, tmp_path_factory: pytest.TempPathFactory):
    from gapcheck.triton.local_server import LocalTritonServer
    from tests.triton.conftest import write_python_model  # its model.py pairs renamed outputs by position

    repo = tmp_path_factory.mktemp("names_repo")
    for name, inputs, outputs, dims in (("ultra", ["images"], ["logits"], ""),
                                        ("torchnames", ["INPUT__0"], ["OUTPUT__0"], ""),
                                        ("wrong_dims", ["x"], ["output"], "3, 16, 16")):
        write_python_model(repo, name, _config(name, golden_onnx, inputs, outputs, dims), {1: golden_onnx})
    server = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("names_work"))
    with server.running(timeout_s=120):
        yield server


def _codes(document: dict) -> list[str]:
    return [f["code"] for f in document["findings"]]


def test_golden_output_name_is_output(golden_onnx):  # what the configs above assume
    assert [o.name for o in golden_onnx.graph.output] == ["output"] and golden_onnx.graph.input[0].name == "x"


def test_deployments_with_their_own_names_pass(renamed, tiny_golden, tmp_path, capsys):
    code, document = night(tiny_golden, tmp_path, [f"ultra=grpc://{renamed.url('grpc')}/ultra",
                                                    f"torch=http://{renamed.url('http')}/torchnames"])
    capsys.readouterr()
    assert code == 0, document["findings"]
    assert [e["status"] for e in document["endpoints"]] == ["pass", "pass"]
    codes = _codes(document)
    assert "golden_output_missing" not in codes and "triton_name_mismatch" not in codes
    assert codes.count("triton_served_names") == 4  # input and output, per endpoint: info
    assert all(f["severity"] == "info" for f in document["findings"] if f["code"] == "triton_served_names")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_map_naming_a_served_input_the_server_lacks_is_exit_2(renamed, tiny_golden, tmp_path, capsys, protocol):
    """Review: x=INPUT_0 (a typo for INPUT__0) was said as "paired the only input left on each side: x=INPUT__0"
    while the requests went out as INPUT_0. A served name the deployment lacks is a usage error listing its names,
    as a golden name the bundle lacks is; nothing is recorded."""
    code = main(["nightly", "--golden", str(tiny_golden), "--history", str(tmp_path / "h.sqlite"),
                 "--endpoint", f"pt={protocol}://{renamed.url(protocol)}/torchnames", "--triton-input-map",
                 "x=INPUT_0", "--json", str(tmp_path / "r.json")])
    captured = capsys.readouterr()
    assert code == 2, captured.out
    assert "endpoint 'pt'" in captured.err and "the served ones 'INPUT__0'" in captured.err
    assert "paired the only input" not in captured.out + captured.err
    assert "[[nightly.endpoints]]" in captured.err  # how to map one endpoint only


def test_dims_the_server_refuses_are_a_gap_not_an_outage(renamed, tiny_golden, tmp_path, capsys):
    code, document = night(tiny_golden, tmp_path, [f"dims=http://{renamed.url('http')}/wrong_dims"], "--no-audit")
    capsys.readouterr()
    assert code == 1
    (finding,) = [f for f in document["findings"] if f["code"] == "endpoint_rejected_request"]
    assert finding["evidence"]["status"] == "400" and "shape" in finding["message"]


def test_the_reason_is_neutralized_and_redacted():
    spec = EndpointSpec(name="prod", address="127.0.0.1:1", protocol="http", ssl=False, model="m",
                        headers={"x-token": "s3cr3t-value"}, input_map={"x": "imgs"})
    exc = RequestRejectedError("m", status="400", reason="bad input\x1b[31m s3cr3t-value\r\nInjected: yes")
    finding = _rejected(spec, exc)
    assert "s3cr3t-value" not in finding.message and "\x1b" not in finding.message and "\n" not in finding.message
    assert finding.is_gap and "x=imgs" in finding.message


def test_a_map_naming_a_golden_input_the_bundle_lacks_is_exit_2(renamed, tiny_golden, tmp_path, capsys):
    code = main(["nightly", "--golden", str(tiny_golden), "--history", str(tmp_path / "h.sqlite"),
                 "--endpoint", f"ultra=grpc://{renamed.url('grpc')}/ultra", "--triton-input-map", "nope=images"])
    assert code == 2 and "does not hold" in capsys.readouterr().err
