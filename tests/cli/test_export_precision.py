"""``gapcheck export --precision fp16|int8 --repository DIR``: the Triton repository gets the fixed model, and only a
verified one; config.pbtxt matches the written model's real data types (read back with Triton's parser)."""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from gapcheck.cli.app import main
from gapcheck.report.envelope import validate

PLANTED = ["export", "--model", "sample_models.planted:build_fp16_overflow", "--input", "x:1x8x16:float32",
           "--no-cache", "--name", "planted"]
CNN = ["export", "--model", "sample_models.cnn:build_small_resnet", "--input", "x:1x3x32x32:float32", "--no-cache",
       "--name", "cnn"]


def _config_types(model_dir: Path) -> dict[str, str]:
    from gapcheck.triton.repository import parse_model_config

    config = parse_model_config((model_dir / "config.pbtxt").read_text(), model_dir.name)
    from tritonclient.grpc import model_config_pb2

    return {t.name: model_config_pb2.DataType.Name(t.data_type) for t in [*config.input, *config.output]}


def _onnx_types(model: onnx.ModelProto) -> dict[str, str]:
    names = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.FLOAT16: "TYPE_FP16",
             onnx.TensorProto.INT64: "TYPE_INT64"}
    return {v.name: names[v.type.tensor_type.elem_type] for v in [*model.graph.input, *model.graph.output]}


def test_fp16_fix_goes_into_the_repository_with_matching_config(tmp_path: Path):
    repo, report = tmp_path / "models", tmp_path / "r.json"
    assert main([*PLANTED, "--precision", "fp16", "--repository", str(repo), "--json", str(report)]) == 0
    document = json.loads(report.read_text())
    validate(document)
    onnx_path = repo / "planted" / "1" / "model.onnx"
    assert document["fix"]["status"] == "verified" and document["fix"]["path"] == str(onnx_path)
    assert document["repository"]["model_dir"] == str(repo / "planted") and document["repository"]["config_checked"]
    model = onnx.load(str(onnx_path))
    assert set(document["fix"]["nodes"]) <= {n.name for n in model.graph.node}
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer)  # the FP16 model, not FP32
    assert _config_types(repo / "planted") == _onnx_types(model)
    assert {t["name"] for t in document["repository"]["inputs"]} == {"x"}


def test_int8_not_fixed_writes_nothing_and_exits_1(tmp_path: Path):
    repo = tmp_path / "models"
    repo.mkdir()
    code = main([*CNN, "--precision", "int8", "--target", "max-rel-error=0", "--triton-repo", str(repo),
                 "--json", str(tmp_path / "r.json")])
    assert code == 1 and list(repo.iterdir()) == []
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["repository"]["model_dir"] is None and document["fix"]["status"] == "insufficient"


def test_int8_verified_model_is_deployed(tmp_path: Path):
    repo = tmp_path / "models"
    assert main([*CNN, "--precision", "int8", "--target", "cosine=0", "--repository", str(repo)]) == 0
    model = onnx.load(str(repo / "cnn" / "1" / "model.onnx"))
    assert any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    assert _config_types(repo / "cnn") == _onnx_types(model)


@pytest.mark.parametrize("flags", [
    ["--calibration-method", "entropy"],  # a precision option without --precision
    ["--target", "cosine=0.9"],
    ["--precision", "bf16"],
    ["--precision", "fp16", "--calibration", "{tmp}/cal.npz"],  # calibration is INT8's
])
def test_bad_flags_exit_2_and_write_nothing(tmp_path: Path, flags: list[str]):
    (tmp_path / "cal.npz").write_bytes(b"")
    repo = tmp_path / "models"
    argv = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    assert main([*PLANTED, "--repository", str(repo), *argv]) == 2
    assert not (repo / "planted").exists()


def test_an_existing_model_is_refused_before_the_precision_run(tmp_path: Path):
    repo = tmp_path / "models"
    (repo / "planted").mkdir(parents=True)
    (repo / "planted" / "config.pbtxt").write_text("a user's model")
    assert main([*PLANTED, "--precision", "fp16", "--repository", str(repo)]) == 2
    assert (repo / "planted" / "config.pbtxt").read_text() == "a user's model"


def test_backend_failure_exits_3(tmp_path: Path, monkeypatch):
    from gapcheck.errors import BackendError
    from gapcheck.precision import int8

    def refuse(self, exclude=()):
        raise BackendError("ONNX Runtime cannot quantize this model (static): planted")

    monkeypatch.setattr(int8.Quantizer, "quantize", refuse)
    repo = tmp_path / "models"
    assert main([*CNN, "--precision", "int8", "--repository", str(repo)]) == 3
    assert not (repo / "cnn").exists()
