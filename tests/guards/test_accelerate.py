"""The Accelerate helper on CPU: a clean loop trips nothing; a NaN gradient and a polluting validation are caught."""
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

accelerate = pytest.importorskip("accelerate")  # an optional integration: tested where Accelerate installs

from gapcheck.guards import EvalModeError, GradientError  # noqa: E402
from gapcheck.guards.integrations.accelerate import AcceleratorGuards  # noqa: E402


def setup(nan=False):
    accelerator = accelerate.Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    if nan:
        model[3].bias.register_hook(lambda g: g * float("nan"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)), batch_size=8)
    return (accelerator, *accelerator.prepare(model, optimizer, loader))


def run(accelerator, model, optimizer, loader, guards):
    for x, y in loader:
        accelerator.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        guards.after_step()
        optimizer.zero_grad()


def test_clean_loop_trips_nothing():
    accelerator, model, optimizer, loader = setup()
    with AcceleratorGuards(accelerator, model, optimizer) as guards:
        run(accelerator, model, optimizer, loader, guards)
        with guards.evaluating():
            model(torch.randn(4, 4))
    assert guards.findings == () and guards.health.checks == 4 and guards.monitor is None


def test_nan_gradient_raises_from_backward():
    accelerator, model, optimizer, loader = setup(nan=True)
    with AcceleratorGuards(accelerator, model, optimizer) as guards, pytest.raises(GradientError, match="3.bias"):
        run(accelerator, model, optimizer, loader, guards)


def test_validation_in_train_mode():
    accelerator, model, optimizer, loader = setup()
    guards = AcceleratorGuards(accelerator, model, optimizer, mode="warn")
    with guards.evaluating():
        model.train()
        model(torch.randn(4, 4))
    assert {f.code for f in guards.findings} == {"guards_bn_pollution", "guards_eval_train_mode"}
    with pytest.raises(EvalModeError), AcceleratorGuards(accelerator, model, optimizer).evaluating():
        model.train()
        model(torch.randn(4, 4))


def amp_setup(accumulate, nan=False):
    # Accelerate creates no GradScaler on CPU; handing it a real one before prepare() gives the fp16 code path
    # (accelerator.backward scales, the prepared optimizer steps through the scaler)
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=accumulate)
    accelerator.scaler = torch.amp.GradScaler("cpu")
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    if nan:
        model[2].bias.register_hook(lambda g: g * float("nan"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(48, 4, generator=g), torch.randn(48, 1, generator=g)), batch_size=4)
    return (accelerator, *accelerator.prepare(model, optimizer, loader))


def run_accumulating(accelerator, model, optimizer, loader, guards):
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            guards.after_step()
            optimizer.zero_grad()


def test_gradient_accumulation_is_not_mistaken_for_skipped_scaler_steps():
    accelerator, model, optimizer, loader = amp_setup(accumulate=3)
    with AcceleratorGuards(accelerator, model, optimizer, scaler_window=3) as guards:
        run_accumulating(accelerator, model, optimizer, loader, guards)
    assert guards.findings == ()
    assert guards.monitor.iterations == guards.monitor.optimizer_steps == 4  # 12 batches / 3


def test_a_scaler_skipping_every_step_is_still_caught_with_accumulation():
    from gapcheck.guards import ScalerError

    accelerator, model, optimizer, loader = amp_setup(accumulate=2, nan=True)
    with AcceleratorGuards(accelerator, model, optimizer, scaler_window=3) as guards, \
            pytest.raises(ScalerError, match="3 of the last 3 optimizer steps were skipped"):
        run_accumulating(accelerator, model, optimizer, loader, guards)
