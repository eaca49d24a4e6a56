"""ONNX files ONNX Runtime refuses at session creation are input errors (exit 2, one line, no C++ signature);
a failure while running stays a backend error (exit 3). Issue 23 attacker #7."""
from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest
from onnx import TensorProto as T

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.errors import BackendError, ExitCode, InputError

_Y = oh.make_tensor_value_info("y", T.FLOAT, [2])


def _model(nodes, outputs, *, opset: int = 17, domains: tuple[str, ...] = ()):
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", T.FLOAT, [2])], outputs)
    imports = [oh.make_opsetid("", opset), *(oh.make_opsetid(d, 1) for d in domains)]
    return oh.make_model(graph, opset_imports=imports)


REJECTED = {
    "custom_domain_op": _model([oh.make_node("Foo", ["x"], ["y"], domain="my.domain")], [_Y], domains=("my.domain",)),
    "opset_99": _model([oh.make_node("Relu", ["x"], ["y"])], [_Y], opset=99),
    "invalid_graph": _model([oh.make_node("Relu", ["nope"], ["y"])], [_Y]),
    "unknown_op": _model([oh.make_node("NoSuchOp", ["x"], ["y"])], [_Y]),
    "no_outputs": _model([oh.make_node("Relu", ["x"], ["y"])], []),
    "output_twice": _model([oh.make_node("Relu", ["x"], ["y"])], [_Y, _Y]),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_a_model_ort_refuses_is_an_input_error_on_one_line(case):
    with pytest.raises(InputError) as caught:
        OnnxRuntimeBackend(REJECTED[case])
    message = str(caught.value)
    assert caught.value.exit_code == ExitCode.USAGE
    assert "\n" not in message and "onnxruntime::" not in message and "std::" not in message, message
    assert ".h:" not in message and "[ONNXRuntimeError]" not in message, message


def test_opset_99_names_the_reason_without_the_cxx_signature():
    with pytest.raises(InputError, match=r"cannot load the model: ONNX Runtime only \*guarantees\*"):
        OnnxRuntimeBackend(REJECTED["opset_99"])


def test_a_failure_on_a_dynamic_dimension_while_running_stays_a_backend_error():
    shape = oh.make_tensor("s", T.INT64, [1], [3])  # 2 values cannot become 3: ORT fails at run time only
    model = oh.make_model(oh.make_graph([oh.make_node("Reshape", ["x", "s"], ["y"])], "g",
                                        [oh.make_tensor_value_info("x", T.FLOAT, [None])],
                                        [oh.make_tensor_value_info("y", T.FLOAT, [3])], [shape]),
                          opset_imports=[oh.make_opsetid("", 17)])
    backend = OnnxRuntimeBackend(model)
    with pytest.raises(BackendError) as caught:
        backend.infer({"x": np.zeros(2, np.float32)})
    assert caught.value.exit_code == ExitCode.BACKEND
