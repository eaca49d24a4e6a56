"""What a verified fix says about each cause it handled: only a module whose nodes it keeps is 'kept in FP32'."""
from __future__ import annotations

from gapcheck.codes.precision import PRECISION_SENSITIVE, PRECISION_TARGET_MISSED
from gapcheck.findings import Severity
from gapcheck.precision.outcome import downgraded


def test_only_the_kept_module_is_said_to_be_kept() -> None:
    kept = PRECISION_SENSITIVE.finding("dense5_2 adds 0.369", where="dense5_2", evidence={"nodes": ["node_linear_2"]})
    left = PRECISION_SENSITIVE.finding("conv2 adds 0.068", where="conv2", evidence={"nodes": ["node_conv2d_1"]})
    missed = PRECISION_TARGET_MISSED.finding("the INT8 model misses cosine 0.99", where="outputs")
    out = [downgraded(f, ("node_linear_2",)) for f in (kept, left, missed)]
    assert all(f.severity is Severity.WARNING for f in out)
    assert out[0].message.endswith("(kept in FP32 by the fix)")
    assert "kept in FP32" not in out[1].message.replace("without it in FP32", "")
    assert "left as it is by the fix" in out[1].message
    assert "kept in FP32" not in out[2].message and "before the fix" in out[2].message


def test_quantizing_does_not_repeat_onnx_runtimes_preprocessing_advice(caplog) -> None:
    """ORT logs 'consider pre-processing before quantization' twice per quantize call (14 lines a run before)."""
    import io
    import logging

    import numpy as np
    import onnx
    import torch

    from gapcheck.precision.int8 import Quantizer
    from tests.precision.models import tiny_convnet

    buffer = io.BytesIO()
    torch.onnx.export(tiny_convnet(), (torch.zeros(1, 3, 16, 16),), buffer, input_names=["x"], dynamo=False)
    model = onnx.load_from_string(buffer.getvalue())
    calibration = [{"x": np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32)} for i in range(2)]
    quantizer = Quantizer(model, "static", calibration)
    try:
        with caplog.at_level(logging.WARNING):
            quantized = quantizer.quantize()
            logging.warning("an unrelated warning still passes")
    finally:
        quantizer.close()
    assert any(n.op_type == "QuantizeLinear" for n in quantized.graph.node)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "pre-processing before quantization" in m]
    assert "an unrelated warning still passes" in messages
