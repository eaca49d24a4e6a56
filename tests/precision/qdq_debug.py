"""ONNX Runtime's own per-tensor INT8 errors (``onnxruntime.quantization.qdq_loss_debug``) by module, to compare with
gapcheck's ranking. ORT reports an SQNR (dB, higher is better) per activation: ``xmodel_err`` between the FP32 model
and the QDQ model (accumulated error), ``qdq_err`` between a tensor before and after its own QuantizeLinear ->
DequantizeLinear (the activation's own rounding, not the weights')."""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from gapcheck.precision.graph import Graph


class _Reader:
    def __init__(self, samples: Sequence[dict[str, np.ndarray]]) -> None:
        self._it = iter(list(samples))

    def get_next(self):  # noqa: ANN201 - ORT's CalibrationDataReader protocol
        return next(self._it, None)

    def __iter__(self):  # noqa: ANN204 - collect_activations iterates the reader
        return iter(self.get_next, None)


def module_sqnr(graph: Graph, quantized: onnx.ModelProto,
                samples: Sequence[dict[str, np.ndarray]]) -> dict[str, dict[str, float]]:
    """Owner module -> {"xmodel_err": worst SQNR of the values its own ops hand on, "qdq_err": likewise}."""
    from onnxruntime.quantization.qdq_loss_debug import (
        collect_activations,
        compute_activation_error,
        create_activation_matching,
        modify_model_output_intermediate_tensors,
    )

    with tempfile.TemporaryDirectory() as folder:
        paths = {name: Path(folder) / f"{name}.onnx" for name in ("f", "q", "f_aug", "q_aug")}
        onnx.save_model(graph.model, str(paths["f"]))
        onnx.save_model(quantized, str(paths["q"]))
        modify_model_output_intermediate_tensors(str(paths["f"]), str(paths["f_aug"]))
        modify_model_output_intermediate_tensors(str(paths["q"]), str(paths["q_aug"]))
        float_acts = collect_activations(str(paths["f_aug"]), _Reader(samples))
        qdq_acts = collect_activations(str(paths["q_aug"]), _Reader(samples))
    errors = compute_activation_error(create_activation_matching(qdq_acts, float_acts))
    ids = {n.name: i for i, n in enumerate(graph.model.graph.node)}
    by_module: dict[str, dict[str, float]] = {}
    for value, measures in errors.items():
        producer = graph.producer_of(value)
        if producer is None:
            continue
        owner = graph.owner(ids[producer])
        entry = by_module.setdefault(owner, {"xmodel_err": np.inf, "qdq_err": np.inf})
        for key in entry:
            if key in measures:
                entry[key] = min(entry[key], float(measures[key]))
    return by_module


def overlap(ours: Sequence[str], theirs: Sequence[str], k: int) -> int:
    return len(set(ours[:k]) & set(theirs[:k]))
