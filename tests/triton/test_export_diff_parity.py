"""export-diff with a Triton column, against the live server of conftest.py."""
from __future__ import annotations

import json

import pytest
import torch

from gapcheck.cli.app import main
from tests.triton.conftest import SECRET_HEADER, SECRET_VALUE, TinyNet


def build_tiny() -> torch.nn.Module:
    """The torch model every conftest deployment serves (same seed as make_tiny_onnx)."""
    torch.manual_seed(0)
    return TinyNet().eval()


ARGS = ["export-diff", "--model", "tests.triton.test_export_diff_parity:build_tiny", "--input", "x:1x3x8x8:float32",
        "--num-samples", "2", "--no-progress"]


@pytest.fixture
def args(tiny_onnx_path):
    """Compare the ONNX file that was deployed (its output is named 'y', as the server's config says)."""
    return [*ARGS, "--onnx", str(tiny_onnx_path)]


def test_matching_deployment_passes_with_triton_column(triton, protocol, tmp_path, capsys, args):
    report = tmp_path / "r.json"
    code = main([*args, "--triton-url", triton.url(protocol), "--triton-model", "tiny", "--protocol", protocol,
                 "--json", str(report)])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, out + captured.err
    doc = json.loads(report.read_text())
    backends = {o["backend"] for o in doc["outputs"]}
    assert backends == {"onnxruntime", f"triton-{protocol}"}
    assert all(o["status"] == "pass" for o in doc["outputs"])
    for record in doc["inputs"]:
        assert set(record["sha256"]) == {"torch", "onnxruntime", f"triton-{protocol}"}
        assert len(set(record["sha256"].values())) == 1


def test_server_side_channel_swap_is_a_triton_only_gap(triton, tmp_path, capsys, args):
    report = tmp_path / "r.json"
    code = main([*args, "--triton-url", triton.url("grpc"), "--triton-model", "tiny_swap", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 1
    assert "ONNX Runtime matches torch; triton-grpc does not" in out
    doc = json.loads(report.read_text())
    codes = {f["code"] for f in doc["findings"]}
    assert "deployment_mismatch" in codes and "output_mismatch" not in codes


def test_fp16_declared_input_found_by_the_audit_before_inference(triton, capsys, args):
    code = main([*args, "--triton-url", triton.url("http"), "--triton-model", "tiny_fp16", "--protocol", "http"])
    out = capsys.readouterr().out
    assert code == 1
    assert "triton_dtype_mismatch" in out and "TYPE_FP16" in out


def test_server_down_exits_3_fast(capsys, args):
    code = main([*args, "--triton-url", "127.0.0.1:9", "--triton-model", "tiny"])
    captured = capsys.readouterr()
    assert code == 3
    assert "Traceback" not in captured.err


def test_auth_header_is_used_and_never_printed(secured_triton, tmp_path, capsys, args):
    report = tmp_path / "r.json"
    code = main([*args, "--triton-url", secured_triton.url("http"), "--triton-model", "tiny", "--protocol", "http",
                 "--triton-header", f"{SECRET_HEADER}:{SECRET_VALUE}", "--json", str(report)])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert SECRET_VALUE not in captured.out + captured.err + report.read_text()


def test_layers_compared_on_the_server_name_the_first_module_the_deployment_changes(triton, tmp_path, capsys, args):
    from tests.triton.conftest import model_py_bytes

    model_py = tmp_path / "model.py"
    model_py.write_bytes(model_py_bytes())  # the served models are Python-backend models: the twin needs it too
    report = tmp_path / "r.json"
    code = main([*args, "--triton-url", triton.url("grpc"), "--triton-model", "tiny_swap", "--triton-layers",
                 "--twin-file", str(model_py), "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 1
    doc = json.loads(report.read_text())
    finding = next(f for f in doc["findings"] if f["code"] == "server_layer_divergence")
    assert finding["evidence"]["module"] == "conv" and finding["evidence"]["server_only"] is True
    assert {row["module"] for row in doc["server_layers"]} >= {"conv", "head"}
    assert "on the Triton server (twin)" in out


def test_layers_on_the_server_match_for_a_faithful_deployment(triton, tmp_path, capsys, args):
    from tests.triton.conftest import model_py_bytes

    model_py = tmp_path / "model.py"
    model_py.write_bytes(model_py_bytes())
    report = tmp_path / "r.json"
    code = main([*args, "--triton-url", triton.url("http"), "--protocol", "http", "--triton-model", "tiny",
                 "--triton-layers", "--twin-file", str(model_py), "--json", str(report)])
    assert code == 0, capsys.readouterr().out
    rows = json.loads(report.read_text())["server_layers"]
    assert rows and all(row["status"] == "pass" for row in rows)
