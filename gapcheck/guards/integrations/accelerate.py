"""AcceleratorGuards: the runtime guards for a loop driven by Hugging Face Accelerate.

Accelerate wraps the model (DDP, FSDP...) and the optimizer, and owns the GradScaler. This helper
finds the pieces behind the wrappers — ``accelerator.unwrap_model(model)``, the prepared optimizer's
``.optimizer``, ``accelerator.scaler`` — and puts the same guards on them::

    guards = AcceleratorGuards(accelerator, model, optimizer)
    with guards:                       # gradient checks after every accelerator.backward()
        for batch in loader:
            accelerator.backward(loss_fn(model(batch)))
            optimizer.step(); guards.after_step(); optimizer.zero_grad()
        with guards.evaluating():      # EvalGuard on the unwrapped model
            validate(model)

With a GradScaler (``mixed_precision="fp16"``) Inf gradients are the scaler's business (it skips those
steps): they are then judged by the scaler monitor in :meth:`after_step`; zero and missing gradients are
still checked after every backward.
Accelerate's prepared scheduler already holds back on skipped steps, so no SteppedOnly is needed.
"""
from __future__ import annotations

from typing import Any

from gapcheck.errors import UsageError
from gapcheck.findings import Finding
from gapcheck.guards.base import Mode

try:
    import accelerate  # noqa: F401 - only to know whether it is there
except ImportError:  # pragma: no cover - depends on what is installed
    accelerate = None


class AcceleratorGuards:
    def __init__(self, accelerator: Any, model: Any, optimizer: Any, *, zero_fraction: float = 0.8, every: int = 1,
                 scaler_window: int = 50, mode: Mode | str = Mode.RAISE) -> None:
        if accelerate is None:  # pragma: no cover - depends on what is installed
            raise UsageError("AcceleratorGuards needs Accelerate: pip install accelerate")
        import torch

        from gapcheck.guards.gradients import GradientHealth
        from gapcheck.guards.scaler import ScalerStepMonitor

        self.mode = Mode.parse(mode)
        self.accelerator = accelerator
        self.model = accelerator.unwrap_model(model)
        self.scaler = getattr(accelerator, "scaler", None)
        self.health = GradientHealth(self.model, zero_fraction=zero_fraction, every=every, mode=self.mode,
                                     nonfinite=self.scaler is None)
        self.monitor = None
        if self.scaler is not None:
            bf16 = torch.bfloat16 if str(getattr(accelerator, "mixed_precision", "")) == "bf16" else None
            self.monitor = ScalerStepMonitor(self.scaler, getattr(optimizer, "optimizer", optimizer),
                                             window=scaler_window, amp_dtype=bf16, mode=self.mode)
        self._eval_guards: list[Any] = []

    def __enter__(self) -> "AcceleratorGuards":
        self.health.attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.health.detach()
        if self.monitor is not None:
            self.monitor.close()

    def after_step(self) -> Any:
        """Call after ``optimizer.step()``: observes the GradScaler (when there is one); returns its report.

        Under ``accelerator.accumulate(model)`` the prepared optimizer's step is a no-op until the gradients are
        synchronized; those batches are not observed (they would count as skipped steps), and None is returned.
        """
        if self.monitor is None or not getattr(self.accelerator, "sync_gradients", True):
            return None
        return self.monitor.observe()

    def evaluating(self) -> Any:
        """An :class:`EvalGuard` on the unwrapped model (eval + no_grad, BN statistics and modes checked)."""
        from gapcheck.guards.evaluation import EvalGuard

        guard = EvalGuard(self.model, mode=self.mode)
        self._eval_guards.append(guard)
        return guard

    @property
    def findings(self) -> tuple[Finding, ...]:
        found = list(self.health.findings) + (list(self.monitor.findings) if self.monitor is not None else [])
        for guard in self._eval_guards:
            found += guard.findings
        return tuple(found)

    @property
    def violations(self) -> int:
        return sum(1 for f in self.findings if f.is_gap)
