"""The model repository writer: golden config, Triton's own protobuf parse, and serving what it declares."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import json_format, text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2

from gapcheck.errors import InputError, UsageError
from gapcheck.triton.audit import audit_deployment
from gapcheck.triton.client import connect
from gapcheck.triton.repository import DEFAULT_MAX_BATCH_SIZE, model_config_text, write_model_repository
from tests.triton.conftest import model_py_bytes

GOLDEN = Path(__file__).parent / "golden"


def static_model() -> onnx.ModelProto:
    """Two inputs (one FP16), fixed batch of 1, a rank-1 output: the cases the config must spell out."""
    a = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 4, 4])
    b = helper.make_tensor_value_info("scale", TensorProto.FLOAT16, [1, "n"])
    out = helper.make_tensor_value_info("score", TensorProto.FLOAT, [1])
    nodes = [helper.make_node("ReduceMean", ["image"], ["score"], keepdims=0, axes=[1, 2, 3])]
    graph = helper.make_graph(nodes, "static", [a, b], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_config_for_dynamic_batch_matches_golden(tiny_onnx, tmp_path):
    model_dir = write_model_repository(tiny_onnx, tmp_path, "tiny")
    assert model_dir == tmp_path / "tiny"
    text = (model_dir / "config.pbtxt").read_text()
    assert text == (GOLDEN / "tiny_config.pbtxt").read_text()
    config = parse(text)
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert list(config.input[0].dims) == [3, 8, 8] and config.input[0].data_type == model_config_pb2.TYPE_FP32
    saved = onnx.load(str(model_dir / "1" / "model.onnx"))
    assert saved.SerializeToString() == tiny_onnx.SerializeToString()


def test_config_for_static_batch_keeps_every_dim(tmp_path):
    text = model_config_text(static_model(), "static")
    assert text == (GOLDEN / "static_config.pbtxt").read_text()
    config = parse(text)
    assert config.max_batch_size == 0
    assert [list(i.dims) for i in config.input] == [[1, 3, 4, 4], [1, -1]]
    assert config.input[1].data_type == model_config_pb2.TYPE_FP16


def test_rank1_tensor_under_batching_is_reshaped_to_scalars():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b"])
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], "g", [x], [y])
    config = parse(model_config_text(helper.make_model(graph), "g", max_batch_size=4))
    assert list(config.output[0].dims) == [1] and list(config.output[0].reshape.shape) == []


def test_explicit_options(tiny_onnx, tmp_path):
    model_dir = write_model_repository(tiny_onnx, tmp_path, "tiny", version=3, max_batch_size=2,
                                       instance_kind="KIND_GPU")
    config = parse((model_dir / "config.pbtxt").read_text())
    assert (model_dir / "3" / "model.onnx").is_file()
    assert config.max_batch_size == 2 and config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_batch_size": 8}, UsageError),  # the graph's batch axis is fixed
        ({"instance_kind": "KIND_TPU"}, UsageError),
        ({"version": 0}, UsageError),
    ],
)
def test_inconsistent_options_are_usage_errors(kwargs, error, tmp_path):
    with pytest.raises(error):
        write_model_repository(static_model(), tmp_path, "static", **kwargs)


def test_unreadable_onnx_file_is_an_input_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all")
    with pytest.raises(InputError):
        write_model_repository(bad, tmp_path / "repo", "bad")


def test_generated_config_is_accepted_and_consistent_on_a_live_server(triton, tiny_onnx, tmp_path, sample):
    # The bundled server has no onnxruntime backend: serve the generated config with the platform swapped for
    # the Python-backend runner, everything else (names, types, dims, batching) exactly as generated.
    model_dir = write_model_repository(tiny_onnx, tmp_path, "generated")
    config = json_format.MessageToDict(parse((model_dir / "config.pbtxt").read_text()),
                                       preserving_proto_field_name=True)
    config.pop("platform")
    config["backend"] = "python"
    files = {"file:1/model.onnx": (model_dir / "1" / "model.onnx").read_bytes(), "file:1/model.py": model_py_bytes()}
    with connect(triton.endpoint("http")) as conn:
        conn.load_model("generated", config=json.dumps(config), files=files)
        try:
            result = audit_deployment(triton.endpoint("http"), "generated", onnx_model=model_dir / "1" / "model.onnx")
            assert result.verdict == "pass", result.findings
            assert result.served.max_batch_size == DEFAULT_MAX_BATCH_SIZE
            out = conn.infer("generated", sample, ["y"])["y"]
            assert out.shape == (2, 5) and np.isfinite(out).all()
        finally:
            conn.unload_model("generated")


def test_tensor_names_with_quotes_and_newlines_survive_tritons_parser():
    x = helper.make_tensor_value_info('in"put\nx\\', TensorProto.FLOAT, ["b", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 2])
    graph = helper.make_graph([helper.make_node("Identity", ['in"put\nx\\'], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    config = parse(model_config_text(model, "odd"))
    assert config.input[0].name == 'in"put\nx\\'


def test_written_config_is_parsed_back_and_names_are_checked_first(tiny_onnx, tmp_path):
    with pytest.raises(UsageError, match="not a valid Triton model name"):
        write_model_repository(tiny_onnx, tmp_path, "bad\nname")
    assert list(tmp_path.iterdir()) == []
