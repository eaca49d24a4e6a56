"""TritonBackend against a real server: parity with ONNX Runtime, planted server-side gaps, faults, secrets."""
from __future__ import annotations

import logging

import numpy as np
import onnxruntime
import pytest

from gapcheck.backends.base import Backend, TensorSpec
from gapcheck.backends.triton import TritonBackend
from gapcheck.compare import Tolerance, TolerancePolicy, compare_arrays
from gapcheck.errors import EndpointError
from gapcheck.triton.client import TritonEndpoint
from tests.triton.conftest import SECRET_HEADER, SECRET_VALUE


def ort_outputs(model, feeds):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def parity(backend, model, feeds):
    expected = ort_outputs(model, feeds)
    actual = backend.infer(feeds)
    policy = TolerancePolicy()
    return {name: compare_arrays(actual[name], value, policy.for_name(name, value.dtype))
            for name, value in expected.items()}


def test_matching_deployment_equals_onnxruntime(triton, protocol, sample):
    with TritonBackend(triton.endpoint(protocol), "tiny") as backend:
        assert isinstance(backend, Backend)
        assert backend.input_specs() == [TensorSpec("x", "float32", (None, 3, 8, 8))]
        assert backend.output_specs() == [TensorSpec("y", "float32", (None, 5))]
        stats = parity(backend, triton.onnx_model, sample)
    assert stats["y"].passed and stats["y"].max_abs < 1e-5


def test_server_side_channel_swap_breaks_parity(triton, protocol, sample):
    with TritonBackend(triton.endpoint(protocol), "tiny_swap") as backend:
        stats = parity(backend, triton.onnx_model, sample)
    assert not stats["y"].passed and stats["y"].max_abs > 1e-3


def test_stale_version_serves_old_weights(triton, sample):
    with TritonBackend(triton.endpoint("grpc"), "tiny_versions") as backend:
        assert backend.served_versions == ("1",)
        assert not parity(backend, triton.onnx_model, sample)["y"].passed
        assert parity(backend, triton.old_onnx_model, sample)["y"].passed


def test_unserved_version_is_an_endpoint_error(triton, protocol):
    with pytest.raises(EndpointError, match="version 2 is not ready"):
        TritonBackend(triton.endpoint(protocol, retries=1), "tiny_versions", version=2)


def test_fp16_declared_input_rejects_fp32_data(triton, protocol, sample):
    with TritonBackend(triton.endpoint(protocol, retries=1), "tiny_fp16") as backend:
        assert backend.input_specs()[0].dtype == "float16"
        with pytest.raises(EndpointError, match="tiny_fp16"):
            backend.infer(sample)
        # Sent as FP16, the request passes and the precision loss shows against the FP32 graph's tolerance.
        half = {"x": sample["x"].astype(np.float16)}
        out = backend.infer(half)["y"]
    assert out.dtype == np.float32
    stats = compare_arrays(out, ort_outputs(triton.onnx_model, sample)["y"], Tolerance(rtol=1e-2, atol=1e-2))
    assert stats.passed and stats.max_abs > 0  # close, but the FP16 rounding is visible


def test_model_not_ready_is_an_endpoint_error_with_the_reason(triton, protocol):
    with pytest.raises(EndpointError) as info:
        TritonBackend(triton.endpoint(protocol, retries=1), "broken")
    assert "not ready" in str(info.value) and "planted load failure" in str(info.value)


def test_secret_header_is_sent_and_never_shown(secured_triton, protocol, sample, caplog):
    caplog.set_level(logging.DEBUG)
    url = secured_triton.url(protocol)
    # Triton's gRPC restriction reads the header under a protocol prefix.
    header = SECRET_HEADER if protocol == "http" else f"triton-grpc-protocol-{SECRET_HEADER}"
    with TritonBackend(TritonEndpoint(url, protocol, headers={header: SECRET_VALUE}), "tiny") as backend:
        assert backend.infer(sample)["y"].shape == (2, 5)
        assert SECRET_VALUE not in backend.where
    wrong = "wrong-" + SECRET_VALUE
    with pytest.raises(EndpointError) as info:
        TritonBackend(TritonEndpoint(url, protocol, headers={header: wrong}, retries=3), "tiny")
    assert SECRET_VALUE not in str(info.value) and wrong not in str(info.value)
    assert "attempts" not in str(info.value)  # an auth failure is not retried
    assert SECRET_VALUE not in caplog.text
