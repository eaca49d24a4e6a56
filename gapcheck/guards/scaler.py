"""ScalerStepMonitor: did ``optimizer.step()`` really run this iteration? And SteppedOnly for schedulers.

A ``GradScaler`` skips ``optimizer.step()`` silently when the scaled gradients hold Inf/NaN and halves
its scale in ``update()``. A few skips while the scale calibrates are normal; most steps skipped means
the model is not training while the scheduler keeps decaying. Two signals, both cheap:

- the optimizer's step count, from ``optimizer.register_step_post_hook`` (exact; attached when the
  optimizer is known, and by :class:`SteppedOnly` from ``scheduler.optimizer``);
- the scale drop between two ``observe()`` calls (``update()`` lowers the scale only after a skip),
  used when no optimizer is attached.

Call ``monitor.observe()`` once per iteration after ``scaler.update()``. It keeps the last ``window``
outcomes and reports a violation when more than ``max_skip_fraction`` of a full window was skipped,
when the scale fell to ``min_scale`` or below, and (a warning) when gradients are bfloat16 — loss
scaling is pointless there and only adds skips.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapcheck.codes.guards import SCALER_BF16, SCALER_COLLAPSED, SCALER_SKIPPING
from gapcheck.errors import UsageError
from gapcheck.findings import Finding, Subject
from gapcheck.guards.base import Guarded, Ledger, Mode, ScalerError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ScalerReport:
    """One observed iteration and the window behind it."""

    iteration: int
    stepped: bool
    scale: float | None  # None when the scaler is disabled
    skipped_in_window: int
    window_filled: int
    skipped_total: int
    optimizer_steps: int | None  # real optimizer steps seen by the hook (None without an attached optimizer)

    @property
    def ok(self) -> bool:
        return self.stepped

    def __bool__(self) -> bool:
        return self.ok


class ScalerStepMonitor(Guarded):
    """Watch a GradScaler (and optionally its optimizer) for skipped steps, a collapsed scale, bf16 misuse."""

    def __init__(self, scaler: Any, optimizer: "torch.optim.Optimizer | None" = None, *, window: int = 50,
                 max_skip_fraction: float = 0.5, min_scale: float = 1.0, amp_dtype: "torch.dtype | None" = None,
                 mode: Mode | str = Mode.RAISE) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1 \
                or not 0.0 <= max_skip_fraction < 1.0:
            raise UsageError(f"window must be an integer >= 1 and max_skip_fraction within [0, 1), "
                             f"got window={window!r}, max_skip_fraction={max_skip_fraction!r}")
        if not all(callable(getattr(scaler, name, None)) for name in ("get_scale", "is_enabled")):
            raise UsageError(f"ScalerStepMonitor needs a torch.amp.GradScaler, got {type(scaler).__name__}")
        self.scaler = scaler
        self.window = window
        self.max_skip_fraction = max_skip_fraction
        self.min_scale = min_scale
        self.amp_dtype = amp_dtype
        self.ledger = Ledger(Mode.parse(mode), ScalerError)
        self._outcomes: deque[bool] = deque(maxlen=window)
        self._handles: dict[int, Any] = {}
        self._optimizers: list[Any] = []
        self.optimizer_steps = 0
        self._steps_at_observe = 0
        self._last_scale: float | None = None  # set below, once the scaler's methods are reachable
        self.iterations = 0
        self.skipped_total = 0
        self._collapsed_flagged = False
        self.last: ScalerReport | None = None
        if optimizer is not None:
            self.attach_optimizer(optimizer)
        self._last_scale = self._scale()  # the initial scale, so a skip on the first iteration shows as a drop

    # -- optimizer step counting -------------------------------------------------------------------
    def attach_optimizer(self, optimizer: "torch.optim.Optimizer") -> None:
        """Count ``optimizer``'s real steps (idempotent)."""
        if id(optimizer) not in self._handles:
            self._handles[id(optimizer)] = optimizer.register_step_post_hook(self._on_step)
            self._optimizers.append(optimizer)

    def _on_step(self, _optimizer: Any, _args: Any, _kwargs: Any) -> None:
        self.optimizer_steps += 1

    @property
    def counts_steps(self) -> bool:
        return bool(self._handles)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.remove()
        self._handles.clear()
        self._optimizers.clear()

    def __enter__(self) -> "ScalerStepMonitor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- per-iteration observation -----------------------------------------------------------------
    def _scale(self) -> float | None:
        return float(self.scaler.get_scale()) if self.scaler.is_enabled() else None

    def observe(self) -> ScalerReport:
        """Record this iteration (call after ``scaler.update()``); raise or warn on a violation."""
        self.iterations += 1
        scale = self._scale()
        if self.counts_steps:
            stepped = self.optimizer_steps > self._steps_at_observe
            self._steps_at_observe = self.optimizer_steps
        else:  # update() lowers the scale only after a skipped step
            stepped = not (scale is not None and self._last_scale is not None and scale < self._last_scale)
        self._last_scale = scale
        self._outcomes.append(stepped)
        self.skipped_total += not stepped
        report = ScalerReport(iteration=self.iterations, stepped=stepped, scale=scale,
                              skipped_in_window=self._outcomes.count(False), window_filled=len(self._outcomes),
                              skipped_total=self.skipped_total,
                              optimizer_steps=self.optimizer_steps if self.counts_steps else None)
        self.last = report
        self.ledger.report(*self._findings(report))
        return report

    def _findings(self, report: ScalerReport) -> list[Finding]:
        found = []
        # Parameter dtypes rarely change: look once, on the first iteration (the check walks every parameter).
        if report.iteration == 1 and self._uses_bf16():
            found.append(SCALER_BF16.finding(
                "GradScaler is used with bfloat16: bf16 has float32's exponent range, so loss scaling is "
                "unnecessary and only adds skipped steps; drop the scaler (or GradScaler(enabled=False))",
                subject=Subject(step="GradScaler"), evidence={"iteration": report.iteration}))
        if report.scale is not None and report.scale <= self.min_scale and not self._collapsed_flagged:
            self._collapsed_flagged = True
            found.append(SCALER_COLLAPSED.finding(
                f"the GradScaler's scale fell to {report.scale:g} (minimum {self.min_scale:g}) at iteration "
                f"{report.iteration}: gradients overflow even unscaled; find the first NaN/Inf in the forward pass",
                subject=Subject(step="GradScaler"),
                evidence={"iteration": report.iteration, "scale": report.scale, "min_scale": self.min_scale}))
        limit = int(self.max_skip_fraction * self.window)
        if report.window_filled == self.window and report.skipped_in_window > limit:
            found.append(SCALER_SKIPPING.finding(
                f"{report.skipped_in_window} of the last {self.window} optimizer steps were skipped by the GradScaler "
                f"(iteration {report.iteration}, scale {report.scale}): the model is not training; look for NaN in "
                "the forward pass and step the scheduler only after real steps (guards.SteppedOnly)",
                subject=Subject(step="GradScaler"),
                evidence={"iteration": report.iteration, "skipped_in_window": report.skipped_in_window,
                          "window": self.window, "skipped_total": report.skipped_total, "scale": report.scale}))
            self._outcomes.clear()  # a violation per window, not per iteration
        return found

    def _uses_bf16(self) -> bool:
        import torch

        if not self.scaler.is_enabled():
            return False
        if self.amp_dtype is torch.bfloat16:
            return True
        for optimizer in self._optimizers:
            for group in optimizer.param_groups:
                if any(p.dtype is torch.bfloat16 or (p.grad is not None and p.grad.dtype is torch.bfloat16)
                       for p in group["params"]):
                    return True
        return False


class SteppedOnly:
    """Wrap a LR scheduler so ``step()`` advances it only after a real optimizer step.

    The monitor counts ``scheduler.optimizer``'s steps; everything else (``get_last_lr``, ``state_dict``)
    passes through to the scheduler. ``held`` counts the scheduler steps held back.
    """

    def __init__(self, scheduler: Any, monitor: ScalerStepMonitor) -> None:
        optimizer = getattr(scheduler, "optimizer", None)
        if optimizer is None:
            raise UsageError(f"{type(scheduler).__name__} has no .optimizer; SteppedOnly needs a torch LR scheduler")
        self.scheduler = scheduler
        self.monitor = monitor
        monitor.attach_optimizer(optimizer)
        self._seen = monitor.optimizer_steps
        self.held = 0
        self.stepped = 0

    def step(self, *args: Any, **kwargs: Any) -> bool:
        """Step the scheduler when the optimizer stepped since the last call; return whether it did."""
        if self.monitor.optimizer_steps > self._seen:
            self._seen = self.monitor.optimizer_steps
            self.scheduler.step(*args, **kwargs)
            self.stepped += 1
            return True
        self.held += 1
        return False

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":  # not set yet (e.g. during unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.scheduler, name)
