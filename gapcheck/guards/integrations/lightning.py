"""GuardsCallback: the runtime guards as a Lightning callback (``lightning`` or ``pytorch_lightning``).

- gradients: :class:`GradientHealth` checked in ``on_before_optimizer_step`` (Lightning has unscaled the
  gradients by then). With a GradScaler (``precision="16-mixed"``) Inf gradients are the scaler's business
  — it skips those steps — so the non-finite check is left to the scaler monitor there (zero and missing
  gradients are still checked);
- the GradScaler: a :class:`ScalerStepMonitor` on the trainer's scaler and optimizers, observed after
  every training batch;
- validation: an :class:`EvalGuard` in watch-only mode from ``on_validation_start`` (Lightning has put
  the module in eval mode) to ``on_validation_end``: BatchNorm statistics changed or modules switched
  to train mode inside validation are reported.

``mode="warn"`` logs and counts instead of raising; ``findings`` collects what every guard found.
"""
from __future__ import annotations

from typing import Any

from gapcheck.errors import UsageError
from gapcheck.findings import Finding
from gapcheck.guards.base import Mode, check_every

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        from pytorch_lightning.callbacks import Callback  # type: ignore[assignment]
    except ImportError:
        Callback = None  # type: ignore[assignment,misc]

_MISSING = "GuardsCallback needs Lightning: pip install lightning"


def _scaler_of(trainer: Any) -> Any:
    plugin = getattr(getattr(trainer, "strategy", None), "precision_plugin", None)
    return getattr(plugin, "scaler", None)


if Callback is None:  # pragma: no cover - depends on what is installed

    class GuardsCallback:  # type: ignore[no-redef]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise UsageError(_MISSING)

else:

    class GuardsCallback(Callback):  # type: ignore[no-redef,valid-type,misc]
        def __init__(self, *, gradients: bool = True, zero_fraction: float = 0.8, every: int = 1,
                     scaler: bool = True, scaler_window: int = 50, validation: bool = True,
                     mode: Mode | str = Mode.RAISE) -> None:
            super().__init__()
            self.gradients = gradients
            self.zero_fraction = zero_fraction
            self.every = check_every(every)
            self.scaler = scaler
            self.scaler_window = scaler_window
            self.validation = validation
            self.mode = Mode.parse(mode)
            self.health: Any = None
            self.monitor: Any = None
            self.eval_guard: Any = None
            self._batches = 0  # optimizer steps reached (on_before_optimizer_step calls)
            self._observed_at = 0
            self._eval_findings: list[Finding] = []

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            from gapcheck.guards.gradients import GradientHealth
            from gapcheck.guards.scaler import ScalerStepMonitor

            if self.gradients:
                self.health = GradientHealth(pl_module, zero_fraction=self.zero_fraction, mode=self.mode)
            grad_scaler = _scaler_of(trainer)
            if self.scaler and grad_scaler is not None:
                self.monitor = ScalerStepMonitor(grad_scaler, window=self.scaler_window, mode=self.mode)
                for optimizer in trainer.optimizers:
                    self.monitor.attach_optimizer(optimizer)

        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            self._batches += 1
            if self.health is not None and not self._batches % self.every:
                # With a GradScaler, Inf gradients are expected now and then (the scaler skips those steps): the
                # scaler monitor judges them; zero and missing gradients are still checked here.
                self.health.nonfinite = _scaler_of(trainer) is None
                self.health.check()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            # Only batches that ended in an optimizer step (taken or skipped by the scaler) are observed: with
            # accumulate_grad_batches=N the other N-1 batches would otherwise count as skipped steps.
            if self.monitor is not None and self._batches > self._observed_at:
                self._observed_at = self._batches
                self.monitor.observe()

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            if self.validation:
                from gapcheck.guards.evaluation import EvalGuard

                self.eval_guard = EvalGuard(pl_module, set_eval=False, no_grad=False, mode=self.mode)
                self.eval_guard.__enter__()

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            guard, self.eval_guard = self.eval_guard, None
            if guard is not None:
                guard.__exit__(None, None, None)
                self._eval_findings += guard.findings

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            if self.monitor is not None:
                self.monitor.close()

        @property
        def findings(self) -> tuple[Finding, ...]:
            found: list[Finding] = []
            for guard in (self.health, self.monitor):
                if guard is not None:
                    found += guard.findings
            return tuple(found + self._eval_findings)

        @property
        def violations(self) -> int:
            return sum(1 for f in self.findings if f.is_gap)
