import pytest
import torch
from torch import nn

from gapcheck.guards import ScalerError, ScalerStepMonitor, SteppedOnly
from tests.guards.conftest import SmallCNN, make_batch


def amp_loop(model, optimizer, scaler, monitor, sched=None, steps=10):
    reports = []
    for step in range(steps):
        x, y = make_batch(step)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        reports.append(monitor.observe())
        if sched is not None:
            sched.step()
    return reports


def overflow(model):
    """Plant an overflow: every backward writes Inf into one gradient, so the scaler skips every step."""
    return model.head.weight.register_hook(lambda g: g + float("inf"))


def test_clean_scaler_loop_trips_nothing(cnn):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    monitor = ScalerStepMonitor(scaler, optimizer, window=5)
    sched = SteppedOnly(torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5), monitor)
    reports = amp_loop(cnn, optimizer, scaler, monitor, sched, steps=6)
    assert all(r.stepped for r in reports) and monitor.violations == 0 and monitor.findings == ()
    assert reports[-1].optimizer_steps == 6 and reports[-1].scale == 65536.0
    assert sched.stepped == 6 and sched.held == 0
    assert sched.get_last_lr()[0] == pytest.approx(0.1 * 0.5**6)  # passes through to the scheduler


def test_forced_overflow_every_step_is_a_violation_and_the_scheduler_is_held(cnn):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    monitor = ScalerStepMonitor(scaler, optimizer, window=10, mode="warn")
    sched = SteppedOnly(torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5), monitor)
    before = cnn.conv.weight.detach().clone()
    overflow(cnn)
    reports = amp_loop(cnn, optimizer, scaler, monitor, sched, steps=10)
    assert not any(r.stepped for r in reports)
    assert torch.equal(cnn.conv.weight, before)  # truly never stepped
    assert reports[-1].skipped_in_window == 10 and reports[-1].optimizer_steps == 0
    assert [f.code for f in monitor.findings] == ["guards_scaler_skipping"] and monitor.violations == 1
    assert "10 of the last 10" in monitor.findings[0].message
    assert sched.held == 10 and sched.get_last_lr()[0] == 0.1  # the LR did not decay while nothing trained


def test_skips_detected_from_the_scale_drop_without_an_optimizer(cnn):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    monitor = ScalerStepMonitor(scaler, window=4)
    overflow(cnn)
    with pytest.raises(ScalerError, match="4 of the last 4") as caught:
        amp_loop(cnn, optimizer, scaler, monitor, steps=4)
    assert monitor.last.optimizer_steps is None and monitor.last.scale == 65536.0 / 16
    assert caught.value.finding.evidence["skipped_in_window"] == 4


def test_scale_collapsing_to_its_minimum(cnn):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    monitor = ScalerStepMonitor(scaler, optimizer, window=50)
    overflow(cnn)
    with pytest.raises(ScalerError, match="scale fell to 1") as caught:
        amp_loop(cnn, optimizer, scaler, monitor, steps=5)
    assert caught.value.finding.code == "guards_scaler_collapsed" and monitor.iterations == 2


def test_bf16_with_a_grad_scaler_is_flagged_once():
    model = SmallCNN().to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    monitor = ScalerStepMonitor(scaler, optimizer)
    x, y = make_batch()
    for _ in range(3):
        optimizer.zero_grad()
        scaler.scale(nn.functional.cross_entropy(model(x.bfloat16()), y)).backward()
        scaler.step(optimizer)
        scaler.update()
        monitor.observe()
    assert [f.code for f in monitor.findings] == ["guards_scaler_bf16"] and monitor.violations == 0
    explicit = ScalerStepMonitor(torch.amp.GradScaler("cpu"), amp_dtype=torch.bfloat16)
    explicit.observe()
    assert explicit.findings[0].code == "guards_scaler_bf16"


def test_close_removes_the_step_hook(cnn):
    optimizer = torch.optim.SGD(cnn.parameters(), lr=0.1)
    with ScalerStepMonitor(torch.amp.GradScaler("cpu"), optimizer) as monitor:
        pass
    x, y = make_batch()
    nn.functional.cross_entropy(cnn(x), y).backward()
    optimizer.step()
    assert monitor.optimizer_steps == 0


def test_stepped_only_needs_a_torch_scheduler():
    from gapcheck.errors import UsageError

    with pytest.raises(UsageError, match="optimizer"):
        SteppedOnly(object(), ScalerStepMonitor(torch.amp.GradScaler("cpu")))
