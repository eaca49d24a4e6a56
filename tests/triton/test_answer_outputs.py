"""An inference answer is read strictly (attacker D12): an output named twice (tritonclient reads the first copy and
drops the other unsaid, whichever is right) or an output whose data does not fit its declared shape (a bare
"ValueError: cannot reshape ...") is an EndpointError naming the endpoint, the model and the output."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
import numpy as np
import pytest

from gapcheck.errors import EndpointError
from gapcheck.triton.client import TritonEndpoint, connect
from tests.triton.hostile_kserve import kserve

X = np.zeros((1, 3, 8, 8), np.float32)
GOOD = [0.5, 1.0, 1.5, 2.0, 2.5]


def _out(data: list[float], name: str = "y") -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": [1, 5], "data": data}


def _infer_http(answer: Callable[[], tuple[Any, ...]]) -> dict[str, np.ndarray]:
    def respond(method: str, path: str, body: bytes) -> tuple[Any, ...]:
        return answer() if path.endswith("/infer") else (404, {"error": "not found"})

    with kserve(respond) as url, connect(TritonEndpoint(url, retries=0)) as conn:
        return conn.infer("m", {"x": X}, ["y"])


def test_a_plain_answer_is_read() -> None:
    arrays = _infer_http(lambda: (200, {"model_name": "m", "outputs": [_out(GOOD)]}))
    assert arrays["y"].tolist() == [GOOD]


@pytest.mark.parametrize("order", ["right_first", "wrong_first"])
def test_an_output_named_twice_is_an_endpoint_error(order: str) -> None:
    copies = [_out(GOOD), _out([9.0] * 5)]
    outputs = copies if order == "right_first" else copies[::-1]
    with pytest.raises(EndpointError) as caught:
        _infer_http(lambda: (200, {"model_name": "m", "outputs": outputs}))
    message = str(caught.value)
    assert "Triton http endpoint http://127.0.0.1:" in message and "model 'm'" in message
    assert "output 'y' 2 times" in message


def test_an_unasked_output_named_twice_is_refused_too() -> None:
    outputs = [_out(GOOD), _out(GOOD, "z"), _out(GOOD, "z")]
    with pytest.raises(EndpointError, match="output 'z' 2 times"):
        _infer_http(lambda: (200, {"model_name": "m", "outputs": outputs}))


def test_a_binary_output_of_the_wrong_size_names_the_endpoint_and_the_output() -> None:
    header = json.dumps({"model_name": "m", "outputs": [
        {"name": "y", "datatype": "FP32", "shape": [1, 5], "parameters": {"binary_data_size": 12}}]}).encode()
    with pytest.raises(EndpointError) as caught:
        _infer_http(lambda: (200, header + b"\x00" * 12, {"Inference-Header-Content-Length": str(len(header))}))
    message = str(caught.value)
    assert "Triton http endpoint http://127.0.0.1:" in message and "output 'y'" in message
    assert "cannot be read as the array it declares" in message and "reshape" in message


@contextmanager
def _grpc_infer(outputs: list[tuple[str, bytes]]) -> Iterator[str]:
    from tritonclient.grpc import service_pb2 as pb

    def infer(request: Any, context: Any) -> Any:
        tensors = [pb.ModelInferResponse.InferOutputTensor(name=name, datatype="FP32", shape=[1, 5])
                   for name, _ in outputs]
        return pb.ModelInferResponse(model_name="m", outputs=tensors, raw_output_contents=[raw for _, raw in outputs])

    handler = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(
            infer, request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=lambda m: m.SerializeToString())})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        server.stop(None)


def _good_raw() -> bytes:
    return np.asarray(GOOD, "<f4").tobytes()


def test_grpc_an_output_named_twice_is_an_endpoint_error() -> None:
    bad = np.full(5, 9.0, "<f4").tobytes()
    said = r"grpc endpoint grpc://127\.0\.0\.1:\d+: model 'm' answered output 'y' 2 times"
    with _grpc_infer([("y", _good_raw()), ("y", bad)]) as url, connect(TritonEndpoint(url, retries=0)) as conn, \
            pytest.raises(EndpointError, match=said):
        conn.infer("m", {"x": X}, ["y"])


def test_grpc_a_short_raw_output_names_the_endpoint_and_the_output() -> None:
    said = r"grpc endpoint grpc://127\.0\.0\.1:\d+: model 'm': its output 'y' cannot be read"
    with _grpc_infer([("y", _good_raw()[:-4])]) as url, connect(TritonEndpoint(url, retries=0)) as conn, \
            pytest.raises(EndpointError, match=said):
        conn.infer("m", {"x": X}, ["y"])


def test_grpc_a_plain_answer_is_read() -> None:
    with _grpc_infer([("y", _good_raw())]) as url, connect(TritonEndpoint(url, retries=0)) as conn:
        assert conn.infer("m", {"x": X}, ["y"])["y"].tolist() == [GOOD]


def test_a_negative_declared_dimension_is_refused() -> None:
    # numpy reshapes [1, -5] as [1, 5]: the right values under a shape no model has would pass unsaid
    with pytest.raises(EndpointError, match=r"model 'm': its output 'y' declares the shape \[1, -5\]"):
        _infer_http(lambda: (200, {"model_name": "m", "outputs": [dict(_out(GOOD), shape=[1, -5])]}))
