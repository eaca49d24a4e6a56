"""ONNX Runtime's ORT_ENABLE_ALL file of a CNN (``SessionOptions.optimized_model_filepath``): on a CPU its layout
transformer writes com.microsoft.nchwc Convs (BatchNorm and activation folded in) whose values hold the channels in
blocks of 8 or 16, padded to a multiple of the block. Those values are read back as NCHW
(:mod:`gapcheck.export_diff.nchwc`), so a planted change is blamed on the conv (or activation) that owns it, not at
the first plain value after ReorderOutput. 20 channels: padded to a whole block, so cropping is exercised too."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from gapcheck.export_diff.nchwc import blocked_values, reblock, unblock, unblock_filter
from gapcheck.export_diff.result import FAIL
from gapcheck.export_diff.runner import export_diff
from gapcheck.model.mapping import index_graph
from sample_models import deployed


class _Block(nn.Module):
    """conv -> BatchNorm -> activation as separate modules (torchvision/timm ResNet style)."""

    def __init__(self, cin: int, cout: int, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class SmallCnn(nn.Module):
    def __init__(self, channels: int = 20) -> None:
        super().__init__()
        self.stem = _Block(3, channels)
        self.dw = _Block(channels, channels, groups=channels)
        self.mix = _Block(channels, channels)
        self.head = nn.Linear(channels, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mix(self.dw(self.stem(x))).mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def nchwc_file():
    torch.manual_seed(deployed.SEED)
    model = deployed.trained_like(SmallCnn())
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(2)]
    exported = deployed.export(model, (torch.from_numpy(samples[0]["x"]),), ["x"], ["y"], dynamo=False)
    return model, samples, deployed.ort_layout_optimized(exported)


def _gaps(result):
    return [f"{f.code}: {f.message}" for f in result.findings if f.is_gap]


def test_blocked_layout_round_trips():
    x = np.random.default_rng(0).standard_normal((1, 20, 3, 4)).astype(np.float32)
    blocked = reblock(x, 8)
    assert blocked.shape == (1, 24, 3, 4)
    np.testing.assert_array_equal(unblock(blocked, 8)[:, :20], x)
    # the order ONNX Runtime keeps: [N][C/B][H][W][B]
    np.testing.assert_array_equal(blocked.reshape(1, 3, 3, 4, 8)[0, 1, 2, 3, :4], x[0, 8:12, 2, 3])


def test_reordered_filters_read_back_as_the_checkpoints(nchwc_file):
    model, _, onnx_model = nchwc_file
    from onnx import numpy_helper

    init = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    convs = [n for n in onnx_model.graph.node if n.domain == "com.microsoft.nchwc" and n.op_type == "Conv"]
    assert len(convs) == 3 and init[convs[2].input[1]].shape[0] in (24, 32)  # 20 channels padded to a block
    blocked = blocked_values(index_graph(onnx_model))
    block = 16 if init[convs[2].input[1]].shape[0] == 32 else 8
    for node, block_module in zip(convs, (model.stem, model.dw, model.mix), strict=True):
        conv, bn = block_module.conv, block_module.bn
        scale = (bn.weight / (bn.running_var + bn.eps).sqrt()).detach().double().numpy()
        expected = conv.weight.detach().double().numpy() * scale.reshape(-1, 1, 1, 1)
        got = unblock_filter(init[node.input[1]], block, node.input[0] not in blocked, tuple(conv.weight.shape[:2]))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_clean_nchwc_file_passes_and_compares_the_blocked_values(nchwc_file):
    model, samples, onnx_model = nchwc_file
    assert any(node.domain == "com.microsoft.nchwc" for node in onnx_model.graph.node)
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", _gaps(result)
    rows = {layer.module: layer for layer in result.layers}
    assert not [m for m, layer in rows.items() if layer.status == FAIL]
    # the blocks' outputs live only in blocked values: read back, they are compared (not set aside)
    assert rows["dw.act"].status == "pass" and rows["stem.act"].status == "pass", (rows["dw.act"], rows["stem.act"])


def _planted(model, what):
    changed = copy.deepcopy(model)
    with torch.no_grad():
        if what == "weight":
            changed.dw.conv.weight.mul_(1.01)
        elif what == "padding":
            changed.dw.conv.padding_mode = "reflect"
        else:
            changed.mix.act = nn.LeakyReLU(0.1)
    return changed


@pytest.mark.parametrize(("what", "module"), [("weight", "dw.conv"), ("padding", "dw.conv"),
                                              ("activation", "mix.act")])
def test_planted_change_in_an_nchwc_file_is_blamed_at_its_module(nchwc_file, what, module):
    model, samples, onnx_model = nchwc_file
    result = export_diff(_planted(model, what), samples, onnx_model=onnx_model)
    fd = result.first_divergence
    assert result.verdict == "gap" and fd is not None
    assert fd.module == module and fd.cause == "local", fd
    if what == "weight":
        assert fd.group[:2] == ("dw.conv", "dw.bn") and any("dw.conv.weight differs" in d for d in fd.differences)
    elif what == "padding":
        assert any("padding mode" in d for d in fd.differences), fd.differences
    else:
        assert any("Relu" in d and "LeakyReLU" in d for d in fd.differences), fd.differences


class GroupedCnn(nn.Module):
    """A grouped conv (RegNet's group width): ONNX Runtime keeps it as a plain-layout FusedConv that applies the
    BatchNorm and the ReLU too, between NCHWc Convs."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = _Block(3, 16)
        self.grouped = _Block(16, 16, groups=4)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.grouped(self.stem(x)).mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def fused_conv_file():
    torch.manual_seed(deployed.SEED)
    model = deployed.trained_like(GroupedCnn())
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    exported = deployed.export(model, (torch.from_numpy(x),), ["x"], ["y"], dynamo=False)
    return model, [{"x": x}], deployed.ort_layout_optimized(exported)


def test_conv_named_at_a_fusedconv_with_its_activation_is_not_a_false_gap(fused_conv_file):
    # was a false gap on timm's regnety_002 at ORT_ENABLE_ALL: grouped.conv's scope names the FusedConv's output,
    # relu(bn(conv)), compared with the bare conv
    model, samples, onnx_model = fused_conv_file
    assert any(node.op_type == "FusedConv" for node in onnx_model.graph.node)
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", _gaps(result)
    rows = {layer.module: layer for layer in result.layers}
    assert rows["grouped.conv"].status != FAIL and rows["grouped.act"].status == "pass"


@pytest.mark.parametrize(("what", "module"), [("weight", "grouped.conv"), ("activation", "grouped.act")])
def test_planted_change_at_a_fusedconv_is_blamed_at_its_module(fused_conv_file, what, module):
    model, samples, onnx_model = fused_conv_file
    changed = copy.deepcopy(model)
    with torch.no_grad():
        if what == "weight":
            changed.grouped.conv.weight.mul_(1.01)
        else:
            changed.grouped.act = nn.LeakyReLU(0.1)
    fd = export_diff(changed, samples, onnx_model=onnx_model).first_divergence
    assert fd is not None and fd.module == module and fd.cause == "local", fd
    assert fd.differences, fd
