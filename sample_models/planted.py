"""Models with planted train/export/inference gaps. Each docstring says what export-diff must find and where.

The table of expectations lives in :mod:`sample_models.catalog`.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class _ExactGeluTanhSymbolic(torch.autograd.Function):
    """A custom op: torch computes the exact (erf) GELU, its ONNX symbolic emits the tanh approximation."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)

    @staticmethod
    def symbolic(g, x):
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))): the tanh approximation, in primitive ops.
        def const(v):
            return g.op("Constant", value_t=torch.tensor(v, dtype=torch.float32))

        cube = g.op("Mul", g.op("Mul", x, x), x)
        inner = g.op("Mul", const(0.7978845608), g.op("Add", x, g.op("Mul", const(0.044715), cube)))
        return g.op("Mul", g.op("Mul", const(0.5), x), g.op("Add", const(1.0), g.op("Tanh", inner)))


class CustomGelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ExactGeluTanhSymbolic.apply(x)


class CustomOpNet(nn.Module):
    """Gap: ``act`` (CustomGelu) exports as tanh-GELU; export with the TorchScript exporter (which uses symbolics)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.act = CustomGelu()
        self.fc2 = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x) * 3.0))


class BranchNet(nn.Module):
    """Gap: a data-dependent branch. Tracing bakes in the branch the export sample took; other inputs differ."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gate = Gate()
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gate(self.fc(x)))


class Gate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0:  # data-dependent Python control flow
            return torch.relu(x)
        return x * 0.5


class PerSampleNet(nn.Module):
    """Gap: the batch size is baked in at export (a Python loop over the batch, unrolled by the tracer)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 6)
        self.pool = BatchLoopPool()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.fc(x))


class BatchLoopPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = [x[i].max(dim=0).values for i in range(int(x.shape[0]))]
        return torch.stack(rows)


class TrainModeNet(nn.Module):
    """Gap: handed over in training mode (BatchNorm uses batch statistics, Dropout is active)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(self.drop(x.mean(dim=(2, 3))))


class Fp16OverflowNet(nn.Module):
    """Gap in FP16 only: ``attn.scores`` produces logits beyond 65504 (no scaling), which become Inf in FP16."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.attn = UnscaledAttention(32)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(self.embed(x)).mean(dim=1))


class Scores(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1)  # forgot the 1/sqrt(d) scaling: fine in FP32, Inf in FP16


class UnscaledAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.scores = Scores()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.scores(self.q(x), self.k(x)), dim=-1)
        return weights @ self.v(x)


def build_custom_op() -> nn.Module:
    """Input x:1x16:float32; export with --exporter torchscript."""
    torch.manual_seed(0)
    return CustomOpNet().eval()


def build_branch() -> nn.Module:
    """Input x:1x8:float32."""
    torch.manual_seed(0)
    return BranchNet().eval()


def build_per_sample_loop() -> nn.Module:
    """Input x:1x5x12:float32."""
    torch.manual_seed(0)
    return PerSampleNet().eval()


def build_train_mode() -> nn.Module:
    """Input x:1x3x16x16:float32. Deliberately returned in training mode."""
    torch.manual_seed(0)
    return TrainModeNet().train()


def build_fp16_overflow() -> nn.Module:
    """Input x:1x8x16:float32; clean in FP32, overflows with --precision fp16."""
    torch.manual_seed(0)
    model = Fp16OverflowNet().eval()
    with torch.no_grad():
        for layer in (model.attn.q, model.attn.k):
            layer.weight.mul_(250.0)
    return model
