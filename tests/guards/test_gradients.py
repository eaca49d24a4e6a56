import logging

import pytest
import torch
from torch import nn

from gapcheck.guards import GradientError, GradientHealth, GuardError
from tests.guards.conftest import SmallCNN, make_batch, train


def test_clean_loop_trips_nothing(cnn):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    with GradientHealth(cnn) as health:
        train(cnn, optimizer, steps=3)
    assert health.violations == 0 and health.findings == ()
    assert health.last is not None and health.last.ok
    assert health.last.backward == 3 and health.last.checked == len(list(cnn.parameters()))
    assert health.last.max_norm > 0


def test_nan_injected_into_a_gradient_is_named_before_the_step(cnn):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    before = cnn.head.weight.detach().clone()
    cnn.head.weight.register_hook(lambda g: g.index_fill(0, torch.tensor([1]), float("nan")))
    with GradientHealth(cnn), pytest.raises(GradientError) as caught:
        train(cnn, optimizer, steps=1)
    assert isinstance(caught.value, GuardError) and caught.value.exit_code == 1
    assert "'head.weight'" in str(caught.value) and "NaN" in str(caught.value)
    assert caught.value.finding.code == "guards_grad_nonfinite"
    assert caught.value.finding.subject.module == "head.weight"
    assert torch.equal(cnn.head.weight, before)  # raised after backward, before optimizer.step()


def test_inf_is_told_apart_from_nan(cnn):
    cnn.conv.bias.register_hook(lambda g: g + float("inf"))
    with GradientHealth(cnn, mode="warn") as health:
        x, y = make_batch()
        nn.functional.cross_entropy(cnn(x), y).backward()
    assert health.violations == 1
    assert health.findings[0].evidence["kind"] == "Inf" and health.last.nonfinite == ("conv.bias",)


def test_warn_mode_logs_and_counts_every_bad_step(cnn, caplog):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.0)
    cnn.head.bias.register_hook(lambda g: g * float("nan"))
    with caplog.at_level(logging.WARNING, logger="gapcheck.guards"), GradientHealth(cnn, mode="warn") as health:
        train(cnn, optimizer, steps=3)
    assert health.violations == 3
    assert sum("guards_grad_nonfinite" in r.getMessage() for r in caplog.records) == 3


def test_every_n_checks_every_nth_backward(cnn):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    with GradientHealth(cnn, every=2) as health:
        train(cnn, optimizer, steps=5)
    assert health.checks == 2


def test_all_zero_gradients_over_the_limit():
    model = SmallCNN()
    # A detached branch: the loss only sees the head's bias, every other gradient is zero.
    x, y = make_batch()
    with GradientHealth(model, zero_fraction=0.5, mode="warn") as health:
        out = model(x) * 0.0 + model.head.bias
        nn.functional.cross_entropy(out, y).backward()
    codes = [f.code for f in health.findings]
    assert "guards_grad_zero" in codes and health.violations == 1
    assert health.last.zero_share > 0.5 and "conv.weight" in health.last.zero


def test_a_parameter_without_gradient_is_a_warning_or_a_violation():
    model = SmallCNN()
    model.unused = nn.Linear(2, 2)
    x, y = make_batch()
    with GradientHealth(model) as health:  # default: a warning, not raised
        nn.functional.cross_entropy(model(x), y).backward()
    assert health.violations == 0 and health.findings[0].code == "guards_grad_missing"
    assert health.last.missing == ("unused.weight", "unused.bias")
    model.zero_grad(set_to_none=True)
    with GradientHealth(model, require_all=True), pytest.raises(GradientError, match="unused.weight"):
        nn.functional.cross_entropy(model(x), y).backward()


def test_hooks_are_removed_on_exit(cnn):
    health = GradientHealth(cnn, mode="warn")
    with health:
        pass
    cnn.head.weight.register_hook(lambda g: g * float("nan"))
    x, y = make_batch()
    nn.functional.cross_entropy(cnn(x), y).backward()  # no guard attached any more: nothing raised
    assert health.checks == 0
    assert not health.check().ok  # the explicit check still works without hooks


def test_underflowing_and_overflowing_norms_are_confirmed_exactly():
    model = nn.Linear(4, 2)
    with GradientHealth(model, mode="warn") as health:
        model.weight.grad = torch.full((2, 4), 1e-30)  # squares underflow to 0 in float32: not an all-zero grad
        model.bias.grad = torch.full((2,), 1e30)  # squares overflow to Inf: still finite values
        report = health.check()
    assert report.ok and report.zero == () and report.nonfinite == ()
    assert report.max_norm == pytest.approx(1e30, rel=1e-6)


def test_nonfinite_false_leaves_inf_to_a_grad_scaler_but_still_reports_it(cnn):
    cnn.head.bias.register_hook(lambda g: g + float("inf"))
    with GradientHealth(cnn, nonfinite=False) as health:
        x, y = make_batch()
        nn.functional.cross_entropy(cnn(x), y).backward()
    assert health.violations == 0 and health.last.nonfinite == ("head.bias",)
