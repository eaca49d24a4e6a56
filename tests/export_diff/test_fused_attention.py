"""ONNX Runtime's transformer optimizer fuses a BERT layer's query, key and value Linears into one ``Attention`` op
whose weight is one initializer ([Wq^T Wk^T Wv^T]) and bias another. A planted change in one of them used to be
blamed downstream (attention.output.dense, inherited); the fused initializer is now read slice by slice against the
checkpoint, and the Linear whose parameter differs is named."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from gapcheck.export_diff.runner import export_diff
from sample_models import deployed

SELF = "encoder.layer.0.attention.self"


def _sample(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(0, 100, (1, 8)).astype(np.int64), "attention_mask": np.ones((1, 8), np.int64),
            "token_type_ids": np.zeros((1, 8), np.int64)}


@pytest.fixture(scope="module")
def fused_bert():
    model = deployed.tiny_bert()
    with torch.no_grad():  # trained attention is peaked: at init a 1% query change moves nothing measurable
        for name in ("query", "key"):
            getattr(model.encoder.layer[0].attention.self, name).weight.mul_(6.0)
    samples = [_sample(0), _sample(1)]
    exported = deployed.export(model, tuple(torch.from_numpy(a) for a in samples[0].values()), list(samples[0]),
                               ["last_hidden_state", "pooler_output"], dynamo=False,
                               dynamic_axes={name: {0: "batch", 1: "sequence"} for name in samples[0]})
    return model, samples, deployed.ort_optimized(exported, num_heads=2, hidden_size=32)


def test_fused_attention_file_passes(fused_bert):
    model, samples, onnx_model = fused_bert
    assert any(node.op_type == "Attention" for node in onnx_model.graph.node)
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", [f.message for f in result.findings if f.is_gap]


@pytest.mark.parametrize(("parameter", "columns"), [("query.weight", "columns 0:32"), ("value.weight", "columns 64:96"),
                                                    ("value.bias", "entries 64:96")])
def test_planted_parameter_inside_the_fused_attention_names_its_linear(fused_bert, parameter, columns):
    model, samples, onnx_model = fused_bert
    changed = copy.deepcopy(model)
    with torch.no_grad():
        tensor = dict(changed.named_parameters())[f"{SELF}.{parameter}"]
        tensor.mul_(1.01) if parameter.endswith("weight") else tensor.add_(0.01)
    result = export_diff(changed, samples, onnx_model=onnx_model)
    fd = result.first_divergence
    assert result.verdict == "gap" and fd is not None
    linear = f"{SELF}.{parameter.split('.')[0]}"
    assert fd.module == linear and fd.cause == "local", fd
    assert any(d.startswith(f"{SELF}.{parameter} differs") and columns in d for d in fd.differences), fd.differences
    assert "Attention" in fd.note
