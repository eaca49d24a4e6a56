"""Backends: one small contract (run named inputs, return named arrays) for torch, ONNX Runtime and Triton."""
from gapcheck.backends.base import Backend, TensorSpec

__all__ = ["Backend", "TensorSpec"]
