"""GuardKit (the gapcheck_guards fixture's object): seeding and restoring, every guard through it, teardown."""
import pytest
import torch
from torch import nn

from gapcheck.guards import GradientError, GuardKit, ScalerError
from tests.guards.conftest import SmallCNN, make_batch, train


def test_seeds_on_setup_and_restores_on_teardown():
    torch.manual_seed(5)
    expected_after = torch.rand(2)
    torch.manual_seed(5)
    with GuardKit(seed=3):
        first = torch.rand(2)
    assert torch.equal(torch.rand(2), expected_after)  # the caller's stream continues untouched
    with GuardKit(seed=3):
        assert torch.equal(torch.rand(2), first)


def test_every_guard_through_the_kit_and_hooks_removed_at_teardown():
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reports = []
    with GuardKit(seed=0, sink=lambda name, report: reports.append((name, report))) as kit:
        health = kit.gradient_health(model)
        contract = kit.input_contract(model, dtype=torch.float32, layout="NCHW")
        monitor = kit.scaler_monitor(torch.amp.GradScaler("cpu"), optimizer, window=2)
        sched = kit.stepped_only(torch.optim.lr_scheduler.StepLR(optimizer, 1), monitor)
        train(model, optimizer, steps=2)
        monitor.observe()
        assert sched.step() and health.checks == 2 and contract.calls == 2
        with kit.eval_guard(model):
            model(make_batch()[0])
        assert kit.assert_no_overlap([torch.zeros(2)], [torch.ones(2)]).ok
        assert kit.check_determinism(SmallCNN, lambda m: train(m, torch.optim.SGD(m.parameters(), lr=0.1), 1)).ok
        kit.profile(lambda batch: model(batch[0]), [make_batch()], steps=2, warmup=0)
    assert [r.steps for _, r in reports] == [2]
    model.head.weight.register_hook(lambda g: g * float("nan"))
    nn.functional.cross_entropy(model(make_batch()[0]), make_batch()[1]).backward()  # no raise
    with pytest.raises(RuntimeError, match="Input type"):  # the conv's own error: the contract's hook is gone
        model(make_batch()[0].double())


def test_kit_mode_applies_to_its_guards():
    model = SmallCNN()
    model.head.bias.register_hook(lambda g: g * float("nan"))
    with GuardKit(mode="warn") as kit:
        health = kit.gradient_health(model)
        nn.functional.cross_entropy(model(make_batch()[0]), make_batch()[1]).backward()
    assert health.violations == 1
    with GuardKit() as kit:
        kit.gradient_health(model)
        with pytest.raises(GradientError):
            nn.functional.cross_entropy(model(make_batch()[0]), make_batch()[1]).backward()
    with GuardKit() as kit, pytest.raises(ScalerError):
        monitor = kit.scaler_monitor(torch.amp.GradScaler("cpu", init_scale=1.0), window=1)
        monitor.observe()
