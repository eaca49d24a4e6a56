"""`gapcheck export` end to end: checkpoint -> model repository -> served -> audited and compared with torch."""
from __future__ import annotations

import json
from importlib import resources

import jsonschema
import numpy as np
import pytest
import torch
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from gapcheck.backends.triton import TritonBackend
from gapcheck.cli.app import main
from gapcheck.compare import TolerancePolicy, compare_arrays
from gapcheck.triton.audit import audit_deployment
from gapcheck.triton.client import connect
from gapcheck.triton.local_server import python_backend_copy
from tests.triton.conftest import model_py_bytes

FACTORY = '''
import torch
from torch import nn


def build():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, 2))
'''


def make_checkpoint(tmp_path):
    factory = tmp_path / "netdef.py"
    factory.write_text(FACTORY)
    namespace: dict = {}
    exec(compile(FACTORY, str(factory), "exec"), namespace)  # noqa: S102 - our own fixture source
    torch.manual_seed(3)
    module = namespace["build"]().eval()
    checkpoint = tmp_path / "ckpt.pt"
    torch.save(module.state_dict(), checkpoint)
    return f"{factory}:build", checkpoint, module


def export(tmp_path, *extra):
    factory, checkpoint, module = make_checkpoint(tmp_path)
    repo = tmp_path / "repo"
    code = main(["export", "--checkpoint", str(checkpoint), "--model", factory, "--input", "x:1x3x8x8:float32",
                 "--triton-repo", str(repo), "--name", "net", *extra])
    return code, repo / "net", module


def test_export_with_dynamo_writes_a_batched_repository(tmp_path, capsys):
    code, model_dir, _ = export(tmp_path, "--json", str(tmp_path / "export.json"))
    assert code == 0
    config = text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 64
    assert [i.name for i in config.input] == ["x"] and list(config.input[0].dims) == [3, 8, 8]
    assert list(config.output[0].dims) == [2]
    report = json.loads((tmp_path / "export.json").read_text())
    schema = json.loads(resources.files("gapcheck.schemas").joinpath("export.schema.json").read_text())
    jsonschema.validate(report, schema)
    assert report["command"] == "export" and report["export"]["exporter"] == "dynamo"
    assert report["repository"]["config_checked"] and report["config"]["inputs"][0]["dims"] == [3, 8, 8]
    assert "exported" in capsys.readouterr().out


def test_exported_repository_serves_what_torch_computes(triton, tmp_path, protocol):
    code, model_dir, module = export(tmp_path, "--exporter", "torchscript")
    assert code == 0
    config = json_format.MessageToDict(
        text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()),
        preserving_proto_field_name=True)
    # No onnxruntime backend in the bundled server: same config, platform swapped for the Python-backend runner.
    config.pop("platform")
    config["backend"] = "python"
    name = f"exported_{protocol}"
    config["name"] = name
    onnx_path = model_dir / "1" / "model.onnx"
    files = {"file:1/model.onnx": onnx_path.read_bytes(), "file:1/model.py": model_py_bytes()}
    x = np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32)
    with connect(triton.endpoint(protocol)) as conn:
        conn.load_model(name, config=json.dumps(config), files=files)
        try:
            assert audit_deployment(triton.endpoint(protocol), name, onnx_model=onnx_path).verdict == "pass"
            with TritonBackend(triton.endpoint(protocol), name) as backend:
                (output,) = backend.output_specs()
                served = backend.infer({"x": x})[output.name]
        finally:
            conn.unload_model(name)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    assert compare_arrays(served, expected, TolerancePolicy().for_name("y")).passed


def test_export_without_inputs_is_a_usage_error(tmp_path):
    assert main(["export", "--triton-repo", str(tmp_path), "--name", "n", "--input", "x:bad"]) == 2


@pytest.mark.parametrize("name", ["net\nname", 'net"quote', "../escape", "sp ace"])
def test_names_triton_would_reject_exit_2_before_anything_is_written(tmp_path, name, capsys):
    factory, checkpoint, _ = make_checkpoint(tmp_path)
    repo = tmp_path / "repo"
    code = main(["export", "--checkpoint", str(checkpoint), "--model", factory, "--input", "x:1x3x8x8:float32",
                 "--triton-repo", str(repo), "--name", name])
    assert code == 2 and "not a valid Triton model name" in capsys.readouterr().err
    assert not repo.exists()


@pytest.mark.parametrize("bad", ["repo_is_a_file", "save_onnx_is_a_dir"])
def test_bad_output_paths_exit_2_before_the_export(tmp_path, bad, capsys):
    factory, checkpoint, _ = make_checkpoint(tmp_path)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    repo, extra = (a_file, []) if bad == "repo_is_a_file" else (tmp_path / "repo", ["--save-onnx", str(tmp_path)])
    code = main(["export", "--checkpoint", str(checkpoint), "--model", factory, "--input", "x:1x3x8x8:float32",
                 "--triton-repo", str(repo), "--name", "net", *extra])
    captured = capsys.readouterr()
    assert code == 2 and "exported" not in captured.out


def test_export_then_export_diff_against_the_deployment_without_onnx_passes(triton, tmp_path, capsys):
    """The documented flow: `gapcheck export`, serve it, `export-diff --triton-url` (export-diff exports again).

    Regression: `export` let dynamo name the output after its last op ('view', 'addmm'), export-diff's own export
    names it as the model does ('output'), so a clean deployment was a `triton_name_mismatch` gap.
    """
    code, model_dir, _ = export(tmp_path)
    assert code == 0
    # Served as docs/triton.md says: the bundled server needs the Python-backend copy of the repository.
    served = python_backend_copy(model_dir.parent, tmp_path / "served") / "net"
    config = json_format.MessageToDict(
        text_format.Parse((served / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()),
        preserving_proto_field_name=True)
    assert [o["name"] for o in config["output"]] == ["output"] and config["backend"] == "python"
    config["name"] = "exported_flow"
    files = {f"file:1/{name}": (served / "1" / name).read_bytes() for name in ("model.onnx", "model.py")}
    factory = f"{tmp_path / 'netdef.py'}:build"
    with connect(triton.endpoint("http")) as conn:
        conn.load_model("exported_flow", config=json.dumps(config), files=files)
        try:
            code = main(["export-diff", "--model", factory, "--checkpoint", str(tmp_path / "ckpt.pt"), "--input",
                         "x:1x3x8x8:float32", "--num-samples", "1", "--no-progress", "--no-cache",
                         "--triton-url", f"http://{triton.url('http')}", "--triton-model", "exported_flow"])
        finally:
            conn.unload_model("exported_flow")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "triton_name_mismatch" not in out
