"""An op change blamed on its own module in a graph a tool rewrote (gapcheck/export_diff/owner.py).

onnxslim merges the LayerNorms' identical weight initializers and drops every scope, ONNX Runtime's optimizer
fuses the second LayerNorm with the residual sum before it (SkipLayerNormalization), so a LayerNorm and a GELU
have no name and, once their op differs from torch's, no value that matches: before the owner search, an epsilon
changed on ``blocks.1.norm`` was reported at ``blocks.1.mlp.fc1`` and GELU -> SiLU at ``blocks.1.mlp.fc2`` (the
same misses as ConvNeXt, DeiT and GPT-2 in the slow deployment-tool corpus, tests/export_diff/test_corpus.py).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from gapcheck.export_diff import localize
from gapcheck.export_diff.runner import export_diff
from sample_models import deployed


class Mlp(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm transformer MLP block (timm's, without attention)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm, self.mlp = nn.LayerNorm(width), Mlp(width)

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.blocks = nn.Sequential(Block(width), Block(width))
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


def _tool_file(tool: str, base):
    if tool == "ort-optimizer":  # blocks.1.norm and the residual sum before it: one SkipLayerNormalization
        return deployed.ort_optimized(base, num_heads=2, hidden_size=16)
    return deployed.slimmed(base)


@pytest.fixture(scope="module", params=["onnxslim", "ort-optimizer"])
def slimmed(request):
    torch.manual_seed(0)
    model = Net().eval()
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 6, 8)).astype(np.float32)} for _ in range(2)]
    onnx_model = _tool_file(request.param, deployed.export(model, (torch.from_numpy(samples[0]["x"]),), ["x"], ["y"]))
    return model, samples, onnx_model


def _planted(model: Net, kind: str) -> Net:
    changed = copy.deepcopy(model)
    if kind == "eps":
        changed.blocks[1].norm.eps = 0.1
    elif kind == "activation":
        changed.blocks[1].mlp.act = nn.SiLU()
    else:
        with torch.no_grad():
            changed.blocks[1].mlp.fc1.weight.mul_(1.01)
    return changed


def test_clean_slimmed_file_passes(slimmed):
    model, samples, onnx_model = slimmed
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", [f.message for f in result.findings if f.is_gap]


@pytest.mark.parametrize(("kind", "module", "evidence"), [
    ("eps", "blocks.1.norm", "blocks.1.norm's epsilon differs: ONNX "),  # (Skip)LayerNormalization epsilon 1e-05
    ("activation", "blocks.1.mlp.act", "the ONNX graph computes Gelu where torch's blocks.1.mlp.act is SiLU"),
    ("weight", "blocks.1.mlp.fc1", None),  # both tools renamed and transposed the weight: no parameter to name
])
def test_op_change_without_a_value_of_its_own_is_found_at_its_module(slimmed, kind, module, evidence):
    model, samples, onnx_model = slimmed
    first = export_diff(_planted(model, kind), samples, onnx_model=onnx_model).first_divergence
    assert first is not None and first.module == module and first.cause == "local", first
    assert evidence is None or any(d.startswith(evidence) and d.endswith(("epsilon 1e-05, torch eps 0.1", "SiLU"))
                                   for d in first.differences), first.differences


@pytest.mark.parametrize(("kind", "neighbour"), [("eps", "blocks.1.mlp.fc1"), ("activation", "blocks.1.mlp.fc2")])
def test_without_the_owner_search_the_neighbour_is_blamed(slimmed, monkeypatch, kind, neighbour):
    """The fixture really is the case the owner search exists for (the previous behaviour, reproduced)."""
    model, samples, onnx_model = slimmed
    monkeypatch.setattr(localize, "find_owner", lambda *args, **kwargs: None)
    first = export_diff(_planted(model, kind), samples, onnx_model=onnx_model).first_divergence
    assert first is not None and first.module == neighbour, first
