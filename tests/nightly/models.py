"""A small CNN defined in code: what the golden bundles in these tests are recorded from."""
from __future__ import annotations

import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.act(self.conv(x))), 1))


def build_tiny(seed: int = 0) -> TinyCNN:
    torch.manual_seed(seed)
    return TinyCNN()


class TwoHeads(nn.Module):
    """Returns a mapping, as Hugging Face models return a ModelOutput: its keys name the outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.body = TinyCNN()
        self.extra = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.body(x)
        return {"logits": logits, "aux": self.extra(logits)}


def build_two_heads() -> TwoHeads:
    torch.manual_seed(1)
    return TwoHeads()


class TwinHeads(nn.Module):
    """Two outputs of one data type and shape (a mapping): what a deployment can list in another order unseen."""

    def __init__(self) -> None:
        super().__init__()
        self.body = TinyCNN()
        self.other = nn.Linear(5, 5)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        left = self.body(x)
        return {"left": left, "right": self.other(left)}


def build_twin_heads() -> TwinHeads:
    torch.manual_seed(2)
    return TwinHeads()
