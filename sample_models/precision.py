"""Models with FP16 problems known from the wild, for ``gapcheck precision``.

- :func:`build_t5_ff_overflow`: transformers' own ``T5LayerFF`` blocks (RMS norm, Linear-ReLU-Linear, residual) whose
  feed-forward output grows beyond 65,504 — T5's FP16 Inf/NaN (transformers issues 4586, 9295, 10830; the large
  checkpoints' late FF layers reach 1e5): in FP16 the ``wo`` MatMul overflows and the next RMS norm turns the Inf
  into NaN.
- :func:`build_t5_rmsnorm`: ``T5LayerNorm`` after activations of a few hundred: ``pow(2)`` reaches 2e5, beyond FP16's
  range, in the FP32 reference. ONNX Runtime fuses the pattern into SimplifiedLayerNormalization, which computes in
  FP32, so on ONNX Runtime nothing breaks (a TensorRT engine may differ): the no-false-alarm case.
- :func:`build_long_sum_pool`: a hand-written mean over a long time axis (``x.sum(-1) / n``, as audio and
  sentence-pooling code writes it): the sum of 40,000 frames is beyond FP16's range in the reference; ONNX Runtime's
  CPU ReduceSum runs it in FP32 (a Cast it inserts), so again nothing breaks there.

All are clean in FP32; the inputs are listed in the builders' docstrings.
"""
from __future__ import annotations

import torch
from torch import nn


class FeedForwardRMS(nn.Module):
    """Linear -> ReLU -> Linear with large activations, then T5's RMS norm, then a classifier."""

    def __init__(self, dim: int = 32, hidden: int = 64, classes: int = 5) -> None:
        super().__init__()
        from transformers.models.t5.modeling_t5 import T5LayerNorm

        self.wi = nn.Linear(dim, hidden)
        self.act = nn.ReLU()
        self.wo = nn.Linear(hidden, dim)
        self.norm = T5LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.wo(self.act(self.wi(x)))))


def build_t5_rmsnorm() -> nn.Module:
    """Input x:1x8x32:float32 (a batch of 8 token vectors)."""
    torch.manual_seed(0)
    model = FeedForwardRMS().eval()
    with torch.no_grad():
        model.wo.weight.mul_(600.0)  # T5's FF outputs grow to hundreds in the late layers of the large checkpoints
    return model


class LongPool(nn.Module):
    """Conv1d features over a long time axis, pooled by a hand-written mean, then a classifier."""

    def __init__(self, channels: int = 8, classes: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv1d(1, channels, 9, padding=4), nn.ReLU())
        self.pool = SumMean()
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)))


class SumMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1) / x.shape[-1]  # the sum of 40,000 frames leaves FP16's range before the division


def build_long_sum_pool() -> nn.Module:
    """Input x:1x1x40000:float32 (a waveform, values in [-1, 1])."""
    torch.manual_seed(0)
    model = LongPool().eval()
    with torch.no_grad():
        model.features[0].bias.fill_(3.0)  # positive features on every frame: the sum grows with the length
    return model


class T5Stack(nn.Module):
    """Two of transformers' T5LayerFF blocks and a classifier."""

    def __init__(self, dim: int = 32, classes: int = 5) -> None:
        super().__init__()
        from transformers import T5Config
        from transformers.models.t5.modeling_t5 import T5LayerFF

        config = T5Config(d_model=dim, d_ff=64, dropout_rate=0.0, feed_forward_proj="relu")
        self.ff = nn.ModuleList([T5LayerFF(config), T5LayerFF(config)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.ff:
            x = layer(x)
        return self.head(x)


def build_t5_ff_overflow() -> nn.Module:
    """Input x:1x8x32:float32."""
    torch.manual_seed(0)
    model = T5Stack().eval()
    with torch.no_grad():
        model.ff[0].DenseReluDense.wo.weight.mul_(2e5)  # the first block's FF output reaches ~1e5, as in t5-large
    return model
