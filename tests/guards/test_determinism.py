import os

import pytest
import torch
from torch import nn

from gapcheck.guards import DeterminismError, check_determinism
from tests.guards.conftest import SmallCNN, train


class UnseededDropout(nn.Module):
    """The planted bug: a dropout drawing from its own generator, seeded from the OS, not from the run's seed."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p
        self.generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = torch.rand(x.shape, generator=self.generator) >= self.p
        return x * keep / (1 - self.p)


def seeded_dropout_model() -> nn.Module:
    return SmallCNN(dropout=0.3)


def unseeded_dropout_model() -> nn.Module:
    model = SmallCNN()
    model.drop = UnseededDropout()
    return model


def train_steps(model):
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=2)


def test_seeded_training_is_deterministic():
    report = check_determinism(seeded_dropout_model, train_steps, n=3)
    assert report.ok and report.runs == 3 and report.compared == len(SmallCNN().state_dict())
    assert len(report.diffs) == 2 * report.compared and report.max_abs == 0.0


def test_unseeded_dropout_is_caught_and_the_first_tensor_named():
    with pytest.raises(DeterminismError, match="first differing tensor 'conv.weight'") as caught:
        check_determinism(unseeded_dropout_model, train_steps)
    report = caught.value.report
    assert report.first_mismatch.name == "conv.weight" and report.first_mismatch.max_abs > 0
    assert caught.value.finding.code == "guards_nondeterministic"
    assert "head.weight" in caught.value.finding.evidence["differing"]


def test_seed_none_leaves_seeding_to_the_callables():
    report = check_determinism(seeded_dropout_model, train_steps, seed=None, mode="warn")
    assert not report.ok  # nobody seeded: the two runs start from different weights


def test_tolerance_follows_export_diff_semantics():
    runs = []

    def noisy(model):  # each run ends 1e-6 apart: within fp32's default atol (1e-4), not within 0
        train_steps(model)
        runs.append(len(runs))
        with torch.no_grad():
            model.head.bias.add_(1e-6 * runs[-1])

    assert check_determinism(seeded_dropout_model, noisy).ok
    report = check_determinism(seeded_dropout_model, noisy, rtol=0.0, atol=0.0, mode="warn")
    assert not report.ok and report.first_mismatch.name == "head.bias"
    assert report.first_mismatch.max_abs == pytest.approx(1e-6, rel=0.1)


def test_the_callers_random_state_is_restored():
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    check_determinism(seeded_dropout_model, train_steps)
    assert torch.equal(torch.rand(3), expected)
    assert not torch.are_deterministic_algorithms_enabled()
