"""A module called several times (ALBERT's shared transformer layer): every call is compared with its own ONNX
value on a run that diverges, and the earliest failing call is where the error starts. Comparing only the last
call blamed the shared layer's first submodule (its last call is fed the error of the earlier calls) whatever
changed: an epsilon, a weight or an activation of another submodule."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from gapcheck.export_diff.runner import export_diff
from sample_models import deployed


class SharedLayer(nn.Module):
    """ALBERT's layer in small: attention-like mixing, a feed-forward and two LayerNorms."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.mix = nn.Linear(width, width)
        self.norm1 = nn.LayerNorm(width)
        self.ffn = nn.Linear(width, 2 * width)
        self.act = nn.GELU()
        self.ffn_output = nn.Linear(2 * width, width)
        self.norm2 = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.mix(x))
        return self.norm2(x + self.ffn_output(self.act(self.ffn(x))))


class SharedEncoder(nn.Module):
    """One layer's weights, applied three times (ALBERT's cross-layer parameter sharing)."""

    def __init__(self, width: int = 16, calls: int = 3) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.layer = SharedLayer(width)
        self.calls = calls

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(x)
        for _ in range(self.calls):
            hidden = self.layer(hidden)
        return hidden


@pytest.fixture(scope="module", params=["dynamo", "torchscript", "onnxslim"])
def shared(request):
    torch.manual_seed(deployed.SEED)
    model = SharedEncoder().eval()
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 6, 8)).astype(np.float32)} for _ in range(2)]
    args = (torch.from_numpy(samples[0]["x"]),)
    exported = deployed.export(model, args, ["x"], ["y"], dynamo=request.param != "torchscript")
    return model, samples, deployed.slimmed(exported) if request.param == "onnxslim" else exported


def _planted(model, kind):
    changed = copy.deepcopy(model)
    with torch.no_grad():
        if kind == "eps":
            changed.layer.norm2.eps = 0.1
        elif kind == "weight":
            changed.layer.ffn_output.weight.mul_(1.01)
        else:
            changed.layer.act = nn.SiLU()
    return changed


def test_clean_shared_layer_passes(shared):
    model, samples, onnx_model = shared
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", [f.message for f in result.findings if f.is_gap]


@pytest.mark.parametrize(("kind", "module"), [("eps", "layer.norm2"), ("weight", "layer.ffn_output"),
                                              ("activation", "layer.act")])
def test_planted_change_in_a_shared_layer_is_blamed_at_its_module_and_call(shared, kind, module):
    model, samples, onnx_model = shared
    result = export_diff(_planted(model, kind), samples, onnx_model=onnx_model)
    fd = result.first_divergence
    assert result.verdict == "gap" and fd is not None
    assert fd.module == module and fd.cause == "local", fd
    if kind == "eps":
        assert any("epsilon differs" in d for d in fd.differences), fd.differences
    if fd.note and "called 3 times" in fd.note:
        assert "call 1 is the first that diverges" in fd.note, fd.note
