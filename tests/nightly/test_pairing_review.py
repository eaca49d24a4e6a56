"""nightly on deployments a new user's review found misjudged (real Triton server, loopback):

- D1: outputs of other shapes served in another order under other names (``prob`` [2], ``box`` [5]) are paired by
  shape, not reported as ``triton_name_mismatch`` + ``golden_output_missing``;
- D2: ``--junit`` has a failing case for an endpoint whose only gap is a deployment finding (it had none: tests=0);
- D8: two same-shaped outputs served in the other order under other names: the ``golden_mismatch`` hint says how
  to map that endpoint alone, and ``triton_output_map`` in its ``[[nightly.endpoints]]`` entry does it while another
  endpoint keeps its own names (the flag maps every endpoint: a name one lacks is exit 2 saying so).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest

from gapcheck.cli.app import main
from gapcheck.golden import RecordRequest, load_bundle, record_bundle
from tests.nightly.conftest import INPUT
from tests.nightly.nights import night


def _config(name: str, outputs: list[tuple[str, int]]) -> str:
    listed = ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ {d} ] }}' for n, d in outputs)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
            f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] }} ]\noutput [ {listed} ]\n'
            'instance_group [ { kind: KIND_CPU count: 1 } ]\n')


def _renamed(model: onnx.ModelProto, names: dict[str, str]) -> onnx.ModelProto:
    """The file with its outputs renamed (the served model answers under the config's names when the file has them)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    for output in copy.graph.output:
        output.name = names.get(output.name, output.name)
    return copy


def _reversed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The file listing its outputs in the other order (a config of other names gets them in the file's order)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    outputs = list(copy.graph.output)[::-1]
    del copy.graph.output[:]
    copy.graph.output.extend(outputs)
    return copy


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in ("two_heads", "twin_heads"):  # logits [5] + aux [2]; left [5] + right [5]
        out[name] = tmp_path_factory.mktemp(name) / "bundle"
        record_bundle(RecordRequest(out=out[name], factory=f"tests/nightly/models.py:build_{name}", input_specs=(INPUT,),
                                    num_samples=6, exporter="torchscript"))
    return out


@pytest.fixture(scope="module")
def server(bundles: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    from gapcheck.triton.local_server import LocalTritonServer
    from tests.triton.conftest import write_python_model

    heads = onnx.load(str(load_bundle(bundles["two_heads"]).onnx_path))
    twins = onnx.load(str(load_bundle(bundles["twin_heads"]).onnx_path))
    repo = tmp_path_factory.mktemp("pairing_repo")
    write_python_model(repo, "heads_shuffled", _config("heads_shuffled", [("prob", 2), ("box", 5)]),
                       {1: _renamed(heads, {"logits": "box", "aux": "prob"})})
    write_python_model(repo, "heads_logits_only", _config("heads_logits_only", [("logits", 5)]), {1: heads})
    write_python_model(repo, "twins_plain", _config("twins_plain", [("left", 5), ("right", 5)]), {1: twins})
    write_python_model(repo, "twins_swapped", _config("twins_swapped", [("OUTPUT__0", 5), ("OUTPUT__1", 5)]),
                       {1: _reversed_outputs(twins)})  # OUTPUT__0 holds right, OUTPUT__1 left
    triton = LocalTritonServer(repo, workdir=tmp_path_factory.mktemp("pairing_work"))
    with triton.running(timeout_s=120):
        yield triton


def _codes(document: dict) -> list[str]:
    return [f["code"] for f in document["findings"]]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_outputs_of_other_shapes_served_in_another_order_are_paired_by_shape(server, bundles, tmp_path, capsys,
                                                                              protocol):
    code, document = night(bundles["two_heads"], tmp_path, [f"shuf={protocol}://{server.url(protocol)}/heads_shuffled"])
    capsys.readouterr()
    assert code == 0, document["findings"]
    codes = _codes(document)
    assert "triton_name_mismatch" not in codes and "golden_output_missing" not in codes, codes
    (named,) = [f for f in document["findings"] if f["code"] == "triton_served_names" and "output" in f["message"]]
    assert named["evidence"]["pairs"] == {"logits": "box", "aux": "prob"}
    assert {o["output"] for o in document["endpoints"][0]["outputs"]} == {"logits", "aux"}


def test_junit_fails_an_endpoint_whose_gap_is_a_deployment_finding(server, bundles, tmp_path, capsys):
    junit = tmp_path / "night.xml"
    code, document = night(bundles["two_heads"], tmp_path, [f"partial=grpc://{server.url('grpc')}/heads_logits_only"],
                            "--junit", str(junit))
    capsys.readouterr()
    assert code == 1 and "golden_output_missing" in _codes(document)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and int(suite.get("failures", "0")) >= 1
    failing = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert any("golden_output_missing" in str(name) for name in failing), failing
    assert {c.get("classname") for c in suite.iter("testcase")} == {"nightly.partial"}


def test_a_swapped_endpoint_is_mapped_alone_in_its_config_entry(server, bundles, tmp_path, capsys):
    plain = f"plain=grpc://{server.url('grpc')}/twins_plain"
    swapped = f"swapped=http://{server.url('http')}/twins_swapped"
    code, document = night(bundles["twin_heads"], tmp_path / "nomap", [plain, swapped])
    capsys.readouterr()
    assert code == 1 and [e["status"] for e in document["endpoints"]] == ["pass", "new_failure"]
    hints = [f["message"] for f in document["findings"] if f["code"] == "golden_mismatch"]
    assert hints and all('triton_output_map = "' in h and "[[nightly.endpoints]]" in h for h in hints), hints

    # the flag maps every endpoint: the plain one has no OUTPUT__1 (exit 2, saying how to map one endpoint)
    code, _ = night(bundles["twin_heads"], tmp_path / "flag", [plain, swapped], "--triton-output-map",
                     "left=OUTPUT__1,right=OUTPUT__0")
    err = capsys.readouterr().err
    assert code == 2 and "endpoint 'plain'" in err and "[[nightly.endpoints]]" in err

    config = tmp_path / "gapcheck.toml"
    config.write_text(f'[[nightly.endpoints]]\nname = "plain"\nurl = "{plain.partition("=")[2]}"\n\n'
                      f'[[nightly.endpoints]]\nname = "swapped"\nurl = "{swapped.partition("=")[2]}"\n'
                      'triton_output_map = "left=OUTPUT__1,right=OUTPUT__0"\n')
    code, document = night(bundles["twin_heads"], tmp_path, [], "--config", str(config))
    capsys.readouterr()
    assert code == 0, document["findings"]
    assert [e["status"] for e in document["endpoints"]] == ["pass", "pass"]


@pytest.mark.parametrize("value, words", [
    ('"left"', "takes"), ('"left=A,left=B"', "twice"), ("3", "GOLDEN=SERVED"), ('{ left = 1 }', "strings"),
])
def test_a_bad_endpoint_map_in_the_config_is_exit_2(bundles, tmp_path, capsys, value, words):
    config = tmp_path / "gapcheck.toml"
    config.write_text('[[nightly.endpoints]]\nname = "e"\nurl = "grpc://127.0.0.1:1/m"\n'
                      f"triton_output_map = {value}\n")
    code = main(["nightly", "--golden", str(bundles["twin_heads"]), "--history", str(tmp_path / "h.sqlite"),
                 "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and "triton_output_map" in err and words in err, err
