"""A changed op before a window partition (Swin) is blamed on its own module, not on the next one with a value.

timm's Swin block: ``norm1`` on [B, H, W, C], the windows cut out by Reshape/Transpose (a shifted block rolls
first: Slice + Concat), ``attn.qkv`` and ``attn.proj`` on [windows, tokens, C], the windows put back, the residual
sum, ``norm2``. Through onnxslim nothing has a scope; norm1 has no value once its epsilon differs, and each Linear
is a Gemm on [windows x tokens, C] (torch: [windows, tokens, C]). The first divergence is at norm2, whose graph cut is
fed torch's proj output: its ops agree, so the error arrived with an input. The input errors skipped a value fed in
torch's shape where the graph holds it flattened, so the culprit was the correct one (the block's input, off by
1e-6), the owner search walked back from it (away from norm1) and norm2 was named, inherited (timm swin_tiny, an
eps on ``layers.1.blocks.0.norm1``; the slow case is tests/export_diff/test_corpus.py -k swin).
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


class WindowAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.softmax, self.proj = nn.Linear(dim, 3 * dim), nn.Softmax(dim=-1), nn.Linear(dim, dim)

    def forward(self, x, mask=None):  # [windows, tokens, C]; mask [windows per image, tokens, tokens]
        windows, tokens, channels = x.shape
        qkv = self.qkv(x).reshape(windows, tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * (channels // self.heads) ** -0.5) @ k.transpose(-2, -1)
        if mask is not None:  # timm's shifted window: tokens from different regions do not attend to each other
            attn = attn.view(-1, mask.shape[0], self.heads, tokens, tokens) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, tokens, tokens)
        return self.proj((self.softmax(attn) @ v).transpose(1, 2).reshape(windows, tokens, channels))


class Mlp(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class SwinBlock(nn.Module):
    """timm's SwinTransformerBlock without the relative position bias (NHWC in, NHWC out; 4x4 tokens)."""

    def __init__(self, dim: int, window: int, shift: int) -> None:
        super().__init__()
        self.window, self.shift = window, shift
        self.norm1, self.attn = nn.LayerNorm(dim), WindowAttention(dim, heads=2)
        self.norm2, self.mlp = nn.LayerNorm(dim), Mlp(dim)
        # timm's attn_mask buffer: a shifted block's windows mix regions. The file holds it as an initializer, so
        # the block is attributed by it to the mask's Add ([1, windows, heads, tokens, tokens] for torch's
        # [1, H, W, C]): localization must not feed torch's block output there.
        regions = torch.zeros(1, 4, 4, 1)
        for k, (rows, cols) in enumerate((r, c) for r in (slice(0, 2), slice(2, 3), slice(3, 4))
                                         for c in (slice(0, 2), slice(2, 3), slice(3, 4))):
            regions[:, rows, cols, :] = k
        cut = regions.view(1, 2, window, 2, window, 1).permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window)
        mask = (cut.unsqueeze(1) - cut.unsqueeze(2) != 0).float() * -100.0
        self.register_buffer("attn_mask", mask if shift else None, persistent=False)

    def forward(self, x):
        batch, height, width, channels = x.shape
        w = self.window
        shifted = torch.roll(self.norm1(x), shifts=(-self.shift, -self.shift), dims=(1, 2)) if self.shift \
            else self.norm1(x)
        windows = shifted.view(batch, height // w, w, width // w, w, channels).permute(0, 1, 3, 2, 4, 5)
        attended = self.attn(windows.reshape(-1, w * w, channels), self.attn_mask)
        merged = attended.view(batch, height // w, width // w, w, w, channels).permute(0, 1, 3, 2, 4, 5)
        merged = merged.reshape(batch, height, width, channels)
        if self.shift:
            merged = torch.roll(merged, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + merged
        flat = x.reshape(batch, height * width, channels)
        return (flat + self.mlp(self.norm2(flat))).reshape(batch, height, width, channels)


class Net(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Linear(3, dim)
        self.blocks = nn.Sequential(SwinBlock(dim, 2, 0), SwinBlock(dim, 2, 1))
        self.head = nn.Linear(dim, 4)

    def forward(self, x):  # [B, H, W, 3]
        return self.head(self.blocks(self.embed(x)).mean(dim=(1, 2)))


@pytest.fixture(scope="module")
def slimmed():
    torch.manual_seed(0)
    model = Net().eval()
    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 4, 4, 3)).astype(np.float32)} for _ in range(2)]
    base = deployed.export(model, (torch.from_numpy(samples[0]["x"]),), ["x"], ["y"])
    return model, samples, deployed.slimmed(base)


def _planted(model: Net, module: str, kind: str = "eps") -> Net:
    changed = copy.deepcopy(model)
    target = dict(changed.named_modules())[module]
    if kind == "eps":
        target.eps = 0.1
    else:
        with torch.no_grad():
            target.weight.mul_(1.01)
    return changed


def test_clean_slimmed_window_attention_passes(slimmed):
    model, samples, onnx_model = slimmed
    result = export_diff(model, samples, onnx_model=onnx_model)
    assert result.verdict == "pass", [f.message for f in result.findings if f.is_gap]


@pytest.mark.parametrize("module", ["blocks.0.norm1", "blocks.1.norm1", "blocks.0.norm2"])
def test_an_eps_before_the_window_partition_is_found_at_its_layernorm(slimmed, module):
    model, samples, onnx_model = slimmed
    first = export_diff(_planted(model, module), samples, onnx_model=onnx_model).first_divergence
    assert first is not None and (first.module, first.cause) == (module, "local"), first
    assert any(d.startswith(f"{module}'s epsilon differs") for d in first.differences), first.differences


def test_an_input_fed_in_torchs_shape_is_compared_flattened():
    """The input errors of a cut compare a value fed as torch's [windows, tokens, C] with ONNX Runtime's [windows x
    tokens, C] (before: left out, so a correct input was the culprit)."""
    fed = {"proj": np.ones((4, 9, 8), np.float32), "x": np.zeros((1, 6, 6, 8), np.float32)}
    computed = {"proj": np.full((36, 8), 1.5, np.float32), "x": np.full((1, 6, 6, 8), 1e-6, np.float32)}
    errors = localize._input_errors(fed, computed)
    assert errors["proj"] == pytest.approx(0.5) and errors["x"] == pytest.approx(1e-6)


@pytest.mark.parametrize("module", ["blocks.1.attn.qkv", "blocks.1.attn.proj", "blocks.0.attn.qkv"])
def test_a_weight_of_a_window_attention_linear_is_found_at_it(slimmed, module):
    """qkv and proj are Gemms on [windows x tokens, C]: compared with torch's [windows, tokens, C] merged (owner.merged),
    fed into a cut merged too (a Reshape the graph computes from the Gemm's shape refused torch's shape). The shifted
    block is attributed by its mask to the mask's Add: its torch output (another size) is not fed into the softmax's
    cut (localize._fitting_frontier; fed, the cut diverged on its own and the softmax was blamed, local)."""
    model, samples, onnx_model = slimmed
    first = export_diff(_planted(model, module, "weight"), samples, onnx_model=onnx_model).first_divergence
    assert first is not None and (first.module, first.cause) == (module, "local"), first
    assert any(d.startswith(f"{module}.weight differs from the checkpoint") for d in first.differences), first
