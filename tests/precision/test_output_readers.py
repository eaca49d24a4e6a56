"""to_precision on a graph that reads one of its outputs again (the dynamo export of a BERT: the pooler's
``hidden_states[:, 0]`` is a Gather on ``last_hidden_state``): the converted model loads and computes the same."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from gapcheck.model.precision import to_precision


def _reads_its_output() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    index = numpy_helper.from_array(np.array(0, dtype=np.int64), "first")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["hidden"], name="dense"),
             helper.make_node("Gather", ["hidden", "first"], ["pooled"], axis=1, name="select")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                              [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, 4, 8]),
                               helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, 8])], [weight, index])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_graph_that_reads_its_own_output_converts_to_a_model_onnx_runtime_loads():
    model = _reads_its_output()
    converted = to_precision(model, "fp16")
    assert [o.type.tensor_type.elem_type for o in converted.graph.output] == [TensorProto.FLOAT] * 2  # kept I/O
    x = np.random.default_rng(1).standard_normal((1, 4, 8)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    actual = ort.InferenceSession(converted.SerializeToString()).run(None, {"x": x})
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-2, atol=1e-2 * np.abs(e).max())
