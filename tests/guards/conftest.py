"""Small models defined in code and a clean training loop for the guard tests (CPU, a few ms per step)."""
from __future__ import annotations

import pytest
import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        return self.head(self.drop(x.mean(dim=(2, 3))))


def make_batch(seed: int = 0, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 4, (n,), generator=g)


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int = 3) -> list[float]:
    losses = []
    model.train()
    for step in range(steps):
        x, y = make_batch(step)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.fixture
def cnn() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN()


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread: on a shared 2-core machine, OpenMP threads waiting for a descheduled sibling turn a
    0.2 ms step into 80 ms, which would make the phase shares these tests assert on depend on the load."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
