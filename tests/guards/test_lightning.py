"""The Lightning callback on CPU: a clean fit trips nothing; NaN gradients and a polluting validation are caught."""
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

pl = pytest.importorskip("lightning.pytorch")  # an optional integration: tested where Lightning installs

from gapcheck.guards import EvalModeError, GradientError  # noqa: E402
from gapcheck.guards.integrations.lightning import GuardsCallback  # noqa: E402


class Module(pl.LightningModule):
    def __init__(self, pollute: bool = False, nan: bool = False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
        self.pollute = pollute
        if nan:
            self.net[3].weight.register_hook(lambda g: g * float("nan"))

    def training_step(self, batch, _):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, _):
        if self.pollute:
            self.train()  # the planted bug
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader():
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)), batch_size=8)


def fit(module, callback):
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0)
    trainer.fit(module, loader(), loader())
    return trainer


def test_clean_fit_trips_nothing():
    callback = GuardsCallback()
    fit(Module(), callback)
    assert callback.findings == () and callback.health.checks == 4


def test_nan_gradient_stops_the_fit():
    with pytest.raises(GradientError, match="net.3.weight"):
        fit(Module(nan=True), GuardsCallback())


def test_validation_in_train_mode_is_caught():
    with pytest.raises(EvalModeError, match="normalization statistics"):
        fit(Module(pollute=True), GuardsCallback())
    callback = GuardsCallback(mode="warn")
    fit(Module(pollute=True), callback)
    assert {f.code for f in callback.findings} == {"guards_bn_pollution", "guards_eval_train_mode"}


def fit_amp(module, callback, accumulate):
    """fp16 autocast with a real GradScaler on CPU (Lightning refuses precision="16-mixed" on CPU by name)."""
    from lightning.pytorch.plugins import MixedPrecision

    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", callbacks=[callback], plugins=[plugin], logger=False,
                         accumulate_grad_batches=accumulate, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(module, loader(), loader())


def test_gradient_accumulation_is_not_mistaken_for_skipped_scaler_steps():
    # 4 batches per epoch, accumulate 3: 2 optimizer steps per epoch; the batches in between are no skips
    callback = GuardsCallback(scaler_window=4)
    fit_amp(Module(), callback, accumulate=3)
    assert callback.findings == ()
    assert callback.monitor.iterations == callback.monitor.optimizer_steps == 6


def test_a_scaler_skipping_every_step_is_still_caught_with_accumulation():
    from gapcheck.guards import ScalerError

    with pytest.raises(ScalerError, match="4 of the last 4 optimizer steps were skipped"):
        fit_amp(Module(nan=True), GuardsCallback(scaler_window=4), accumulate=2)
