"""Graphs with neither scopes nor weight names (a name-normalising tool: every node and initializer renamed).
Modules are matched by value (the ONNX value agreeing with the module's output under the noise-aware tolerance on
the first sample, then checked on the others); a module whose torch output is the model's output itself is named
at that graph output. A planted change is localized at its module (it was an output mismatch without a module),
a renamed weight that differs is read by value, and a clean file passes."""
from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from gapcheck.export_diff.result import FAIL
from gapcheck.export_diff.runner import export_diff
from sample_models import deployed


class Block(nn.Module):
    """A post-norm transformer feed-forward (BERT's output block): its LayerNorm's result is the model's output."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.dense = nn.Linear(width, 2 * width)
        self.act = nn.GELU()
        self.out = nn.Linear(2 * width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.out(self.act(self.dense(x))))


def nameless(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every node name, scope and initializer name replaced."""
    stripped = deployed.without_scopes(model)
    names = {t.name: f"t{i}" for i, t in enumerate(stripped.graph.initializer)}
    for tensor in stripped.graph.initializer:
        tensor.name = names[tensor.name]
    for node in stripped.graph.node:
        node.input[:] = [names.get(name, name) for name in node.input]
    return stripped


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(deployed.SEED)
    model = Block().eval()
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 5, 16)).astype(np.float32)} for _ in range(2)]
    exported = deployed.export(model, (torch.from_numpy(samples[0]["x"]),), ["x"], ["y"])
    return model, samples, nameless(exported)


def test_nameless_graph_passes(block):
    model, samples, onnx_model = block
    assert not any(t.name.endswith(".weight") for t in onnx_model.graph.initializer)
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", [f.message for f in result.findings if f.is_gap]
    assert not [layer.module for layer in result.layers if layer.status == FAIL]


def test_epsilon_of_the_last_layernorm_is_found_at_it(block):
    # was output_mismatch without a module: the LayerNorm's value is the graph output, too far (eps 0.1) to be the
    # "nearest" value of its torch output, and no name or weight maps it
    model, samples, onnx_model = block
    changed = copy.deepcopy(model)
    changed.norm.eps = 0.1
    result = export_diff(changed, samples, onnx_model=onnx_model)
    fd = result.first_divergence
    assert result.verdict == "gap" and fd is not None and fd.module == "norm" and fd.cause == "local", fd
    assert any("epsilon differs" in d for d in fd.differences), fd.differences


def test_renamed_weight_that_differs_is_named_by_value(block):
    model, samples, onnx_model = block
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.dense.weight.mul_(1.01)
    fd = export_diff(changed, samples, onnx_model=onnx_model).first_divergence
    assert fd is not None and fd.module == "dense" and fd.cause == "local", fd
    assert any(d.startswith("dense.weight differs") for d in fd.differences), fd.differences
