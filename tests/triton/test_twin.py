"""Server-side intermediates through a temporary twin model (explicit model control on the test server)."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from gapcheck.compare import Tolerance, compare_arrays
from gapcheck.errors import EndpointError, UsageError
from gapcheck.triton.client import connect
from gapcheck.triton.twin import compare_intermediates_on_server, mark_outputs
from tests.triton.conftest import model_py_bytes


def inner_values(model):
    return [node.output[0] for node in model.graph.node if node.op_type in ("Conv", "Relu")]


def local_run(model, names, feeds):
    twin = mark_outputs(model, names)
    session = onnxruntime.InferenceSession(twin.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def twins_left(triton):
    with connect(triton.endpoint("http")) as conn:
        return [e for e in conn.repository_index() if "gapcheck_twin" in e["name"] and e.get("state") == "READY"]


def test_mark_outputs_adds_typed_outputs(tiny_onnx):
    names = inner_values(tiny_onnx)
    twin = mark_outputs(tiny_onnx, names)
    assert [o.name for o in twin.graph.output] == ["y", *names]
    assert all(o.type.tensor_type.elem_type for o in twin.graph.output)
    assert [o.name for o in tiny_onnx.graph.output] == ["y"]  # the original is untouched


def test_mark_outputs_rejects_unknown_values(tiny_onnx):
    with pytest.raises(UsageError, match="not a value"):
        mark_outputs(tiny_onnx, ["no/such/value"])


def test_intermediates_on_server_match_local_onnxruntime(triton, protocol, sample):
    names = inner_values(triton.onnx_model)
    served = compare_intermediates_on_server(
        triton.endpoint(protocol), "tiny", triton.onnx_model, names, sample,
        extra_files={"model.py": model_py_bytes()})
    local = local_run(triton.onnx_model, names, sample)
    assert set(served) == {"y", *names}
    for name in served:
        assert compare_arrays(served[name], local[name], Tolerance(1e-5, 1e-5)).passed, name
    assert twins_left(triton) == []


def test_intermediates_locate_the_server_side_channel_swap_at_the_first_layer(triton, sample):
    names = inner_values(triton.onnx_model)
    served = compare_intermediates_on_server(
        triton.endpoint("grpc"), "tiny_swap", triton.onnx_model, names, sample,
        extra_files={"model.py": model_py_bytes()})
    local = local_run(triton.onnx_model, names, sample)
    first = names[0]
    assert not compare_arrays(served[first], local[first], Tolerance(1e-4, 1e-4)).passed
    # Same values on the other side of the swap: the layer itself is fine, its input was not.
    assert np.allclose(served[first], local_run(triton.onnx_model, names, {"x": sample["x"][:, ::-1].copy()})[first],
                       atol=1e-5)


def test_twin_is_unloaded_when_inference_fails(triton, sample):
    bad = {"x": sample["x"][:, :2].copy()}  # two channels: the server rejects the request
    with pytest.raises(EndpointError):
        compare_intermediates_on_server(
            triton.endpoint("http", retries=0), "tiny", triton.onnx_model, inner_values(triton.onnx_model), bad,
            extra_files={"model.py": model_py_bytes()})
    assert twins_left(triton) == []
