"""model/onnx_file: ONNX files read the hostile-input way and written atomically."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from gapcheck.errors import InputError, UsageError
from gapcheck.model.onnx_file import load_onnx, save_onnx


def _relu():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(graph)


def test_save_creates_folders_replaces_the_file_whole_and_reads_back(tmp_path):
    target = tmp_path / "out" / "model.onnx"
    target.parent.mkdir()
    target.write_bytes(b"an older, longer file that must not leave a tail behind" * 100)
    save_onnx(_relu(), target)
    assert load_onnx(target).graph.node[0].op_type == "Relu"
    assert [p.name for p in target.parent.iterdir()] == ["model.onnx"]


def test_save_never_writes_through_a_link_and_load_refuses_what_is_not_onnx(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "model.onnx").symlink_to(victim)
    with pytest.raises(UsageError, match="symbolic link"):
        save_onnx(_relu(), tmp_path / "model.onnx")
    assert victim.read_text() == "mine"
    with pytest.raises(InputError, match="not a valid ONNX model"):
        load_onnx(victim)


def _rms_norm(domain: str, op_type: str = "SimplifiedLayerNormalization", with_import: bool = True):
    """A T5/RMSNorm node as ONNX Runtime's transformer optimizer writes it (ONNX has no such op)."""
    import numpy as np
    from onnx import numpy_helper

    node = helper.make_node(op_type, ["x", "w"], ["y"], domain=domain, epsilon=1e-6, axis=-1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.ones(4, np.float32), "w")])
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain and with_import else [])
    return helper.make_model(graph, opset_imports=imports)


def test_onnxruntime_own_ops_load_and_run_as_onnxruntime_runs_them(tmp_path):
    import numpy as np
    import onnxruntime as ort

    target = tmp_path / "t5.onnx"
    target.write_bytes(_rms_norm("").SerializeToString())
    model = load_onnx(target)  # the checker alone refuses it: "No Op registered for SimplifiedLayerNormalization"
    assert model.graph.node[0].domain == "" and [o.domain for o in model.opset_import] == [""]  # given back as read
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.ones((1, 4), np.float32)})[0].shape == (1, 4)
    skip = helper.make_node("SkipLayerNormalization", ["x", "x", "w", "w"], ["s"], domain="com.microsoft")
    fused = _rms_norm("com.microsoft", "FusedMatMul")
    fused.graph.node[0].CopyFrom(skip)
    fused.graph.output[0].name = "s"
    (tmp_path / "fused.onnx").write_bytes(fused.SerializeToString())
    assert load_onnx(tmp_path / "fused.onnx").graph.node[0].op_type == "SkipLayerNormalization"


def test_the_checker_still_refuses_what_onnxruntime_would_not_run(tmp_path):
    cases = {"unknown.onnx": _rms_norm("", "NoSuchOp"),  # no runtime has it
             "noimport.onnx": _rms_norm("com.microsoft", with_import=False)}  # a contrib op without its opset import
    broken = _rms_norm("")
    broken.graph.node.append(helper.make_node("Relu", ["missing"], ["z"]))  # an input nobody produces
    cases["broken.onnx"] = broken
    for name, model in cases.items():
        (tmp_path / name).write_bytes(model.SerializeToString())
        with pytest.raises(InputError, match="not a valid ONNX model"):
            load_onnx(tmp_path / name)


def test_computes_in_fp16_counts_weight_elements_and_casts():
    import numpy as np
    from onnx import numpy_helper

    from gapcheck.model.onnx_file import computes_in_fp16

    def graph(*tensors, nodes=()):
        g = helper.make_graph([*nodes, helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                              [numpy_helper.from_array(t, f"w{i}") for i, t in enumerate(tensors)])
        return helper.make_model(g)

    big16, small32 = np.zeros(100, np.float16), np.zeros(3, np.float32)
    assert computes_in_fp16(graph(big16, small32))  # an FP16 body keeps a few FP32 constants
    assert not computes_in_fp16(graph(np.zeros(100, np.float32), np.zeros(3, np.float16)))  # one FP16 table
    assert not computes_in_fp16(graph(np.zeros(100, np.int8)))  # a quantized file is not an FP16 one
    constant = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(big16, "c"))
    assert computes_in_fp16(graph(small32, nodes=[constant]))
    cast = helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16)
    assert computes_in_fp16(graph(nodes=[cast])) and not computes_in_fp16(graph())
