"""ONNX Runtime backend: one session, named inputs in, named outputs (graph + marked intermediates) out."""
from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
import onnx
import onnxruntime as ort

from gapcheck.backends.base import TensorSpec
from gapcheck.errors import BackendError
from gapcheck.model.mapping import with_extra_outputs
from gapcheck.model.onnx_file import condense_error
from gapcheck.tensors import fingerprint

log = logging.getLogger(__name__)

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(bool)": "bool", "tensor(bfloat16)": "bfloat16",
}


class OnnxRuntimeBackend:
    """Runs an ONNX model in ONNX Runtime; ``extra_outputs`` are intermediate values marked as graph outputs."""

    def __init__(
        self,
        model: onnx.ModelProto,
        *,
        extra_outputs: Sequence[str] = (),
        name: str = "onnxruntime",
        providers: Sequence[str] = ("CPUExecutionProvider",),
        threads: int | None = None,
    ) -> None:
        self.name = name
        self.last_input_fingerprints: dict[str, str] = {}  # SHA256 of what the last infer() fed the session
        marked = with_extra_outputs(model, list(extra_outputs)) if extra_outputs else model
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: warnings about unused initializers are noise here
        if threads:
            options.intra_op_num_threads = threads
        try:
            self._session = ort.InferenceSession(marked.SerializeToString(), options, providers=list(providers))
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise BackendError(f"ONNX Runtime could not load the model: {condense_error(exc)}") from exc

    @staticmethod
    def _specs(args) -> list[TensorSpec]:
        return [TensorSpec(a.name, _ORT_TYPES.get(a.type, a.type), tuple(a.shape)) for a in args]

    def input_specs(self) -> list[TensorSpec]:
        return self._specs(self._session.get_inputs())

    def output_specs(self) -> list[TensorSpec]:
        return self._specs(self._session.get_outputs())

    def infer(self, feeds: dict[str, np.ndarray], output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(output_names) if output_names is not None else [o.name for o in self._session.get_outputs()]
        expected = {i.name for i in self._session.get_inputs()}
        missing = expected - set(feeds)
        if missing:
            raise BackendError(f"ONNX Runtime needs inputs {sorted(missing)}; given {sorted(feeds)}")
        fed = {k: v for k, v in feeds.items() if k in expected}
        self.last_input_fingerprints = {k: fingerprint(v) for k, v in fed.items()}
        try:
            values = self._session.run(names, fed)
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"ONNX Runtime failed to run: {condense_error(exc)}") from exc
        return dict(zip(names, values))
