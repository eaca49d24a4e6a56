"""GradientHealth: NaN/Inf per named parameter, and the share of all-zero gradients, after every backward.

Inside ``with GradientHealth(model):`` every parameter gets a post-accumulate-grad hook. The first
hook to fire in a backward pass queues one callback on the autograd engine, which runs when the whole
backward has finished (all gradients accumulated) and before the loop's ``optimizer.step()`` — so a
NaN is caught before it reaches the weights. ``check()`` runs the same test on demand, without hooks.

Why it is cheap: one ``torch._foreach_norm(grads)`` (a single fused pass over all gradients on each
device) gives, per parameter, the L2 norm: NaN when the gradient holds a NaN, Inf when it holds an Inf,
0 when it is all zero, finite otherwise; the rare zero or non-finite norms are confirmed with the exact
max-abs norm (squares can under/overflow). One ``tolist()`` brings those numbers to the host (the only
device sync). Names are looked up only when something is wrong.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapcheck.codes.guards import GRAD_MISSING, GRAD_NONFINITE, GRAD_ZERO
from gapcheck.errors import UsageError
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.guards.base import GradientError, Guarded, Ledger, Mode, check_every, shorten

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class GradientReport:
    """One gradient check: which parameters were non-finite, all-zero or without a gradient."""

    backward: int  # 1-based count of backward passes seen (or checks made)
    checked: int  # parameters that had a gradient
    nonfinite: tuple[str, ...]
    zero: tuple[str, ...]
    missing: tuple[str, ...]
    zero_share: float
    max_norm: float  # largest finite per-parameter L2 norm of the gradient

    @property
    def ok(self) -> bool:
        return not self.nonfinite and not self.missing and self.checked > 0

    def __bool__(self) -> bool:
        return self.ok


def _norms(grads: list["torch.Tensor"], order: float) -> list[float]:
    import torch

    norms: list[torch.Tensor] | tuple[torch.Tensor, ...]
    try:
        norms = torch._foreach_norm(grads, order)
    except (AttributeError, RuntimeError):  # a private op: fall back to the public per-tensor one
        norms = [torch.linalg.vector_norm(g, order) for g in grads]
    if len({(n.device, n.dtype) for n in norms}) == 1:
        return torch.stack(list(norms)).tolist()  # one device sync for all parameters
    return [float(n) for n in norms]  # parameters on several devices or dtypes: one sync each


def _grad_norms(grads: list["torch.Tensor"]) -> list[float]:
    """Per-gradient L2 norm: NaN when it holds a NaN, Inf when it holds an Inf, 0 exactly when all zero.

    The L2 norm is one fast fused pass (the max-abs norm is ~10x slower on CPU), but squares can overflow
    (|g| > 1e19 in float32) or underflow (|g| < 1e-19); the few non-finite or zero results are therefore
    confirmed with the exact max-abs norm before anything is reported.
    """
    dense = [g.coalesce().values() if g.is_sparse else g for g in grads]
    values = _norms(dense, 2.0)
    suspects = [i for i, v in enumerate(values) if v == 0.0 or not math.isfinite(v)]
    if suspects:  # the exact max-abs norm decides; for an under/overflowed L2 it is also the better magnitude
        for i, exact in zip(suspects, _norms([dense[i] for i in suspects], float("inf")), strict=True):
            values[i] = exact
    return values


class GradientHealth(Guarded):
    """Check every backward pass of ``model`` for NaN/Inf gradients and mostly-zero gradients.

    ``zero_fraction``: the largest share of parameters allowed an all-zero gradient (default 0.8).
    ``require_all``: a parameter without a gradient is a violation (else a warning, once per set).
    ``every``: check every N-th backward pass. ``nonfinite=False`` leaves Inf/NaN gradients alone (still in the
    report) for loops with a GradScaler, which skips those steps itself. ``mode``: "raise" or "warn".
    """

    def __init__(self, model: "torch.nn.Module", *, zero_fraction: float = 0.8, require_all: bool = False,
                 every: int = 1, nonfinite: bool = True, mode: Mode | str = Mode.RAISE) -> None:
        if not 0.0 <= zero_fraction <= 1.0:
            raise UsageError(f"zero_fraction must be within [0, 1], got {zero_fraction}")
        self.model = model
        self.zero_fraction = zero_fraction
        self.require_all = require_all
        self.nonfinite = nonfinite
        self.every = check_every(every)
        self.ledger = Ledger(Mode.parse(mode), GradientError)
        self._named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if not self._named:
            raise UsageError(f"{type(model).__name__} has no parameter that requires grad")
        self._handles: list[Any] = []
        self._queued = False
        self._queued_task: int | None = None
        import torch

        self._graph_task = getattr(torch._C, "_current_graph_task_id", None)  # private; absent: the old flag alone
        self._backwards = 0
        self._reported_missing: frozenset[str] = frozenset()
        self.last: GradientReport | None = None
        self.checks = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "GradientHealth":
        self.attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def attach(self) -> None:
        if self._handles:
            return
        self._handles = [p.register_post_accumulate_grad_hook(self._on_grad) for _, p in self._named]

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _on_grad(self, _param: Any) -> None:
        # A backward that raised never runs its queued callback; keyed by the graph task, the next backward
        # queues its own instead of finding the flag stuck (which would switch the guard off for good).
        task = self._graph_task() if self._graph_task is not None else None
        if self._queued and (task is None or task == self._queued_task):
            return
        import torch

        self._queued, self._queued_task = True, task
        torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)

    def _after_backward(self) -> None:
        self._queued = False
        self._backwards += 1
        if self._backwards % self.every == 0:
            self.check()

    # -- the check ---------------------------------------------------------------------------------
    def check(self) -> GradientReport:
        """Check the current ``.grad`` of every parameter; raise or warn on a violation; return the report."""
        self.checks += 1
        present = [(name, p.grad) for name, p in self._named if p.grad is not None]
        missing = tuple(name for name, p in self._named if p.grad is None)
        values = _grad_norms([g for _, g in present]) if present else []
        nonfinite = tuple(name for (name, _), v in zip(present, values, strict=True) if not math.isfinite(v))
        zero = tuple(name for (name, _), v in zip(present, values, strict=True) if v == 0.0)
        finite = [v for v in values if math.isfinite(v)]
        report = GradientReport(backward=self._backwards or self.checks, checked=len(present), nonfinite=nonfinite,
                                zero=zero, missing=missing, zero_share=len(zero) / len(present) if present else 0.0,
                                max_norm=max(finite, default=0.0))
        self.last = report
        self.ledger.report(*self._findings(report, dict(zip((n for n, _ in present), values, strict=True))))
        return report

    def _findings(self, report: GradientReport, values: dict[str, float]) -> list[Finding]:
        model = type(self.model).__name__
        found = []
        if report.nonfinite and self.nonfinite:
            first = report.nonfinite[0]
            kind = "NaN" if math.isnan(values[first]) else "Inf"
            found.append(GRAD_NONFINITE.finding(
                f"gradient of {first!r} in {model} is {kind} after backward {report.backward} "
                f"({len(report.nonfinite)} parameter(s) non-finite: {shorten(report.nonfinite)}); find the op with "
                "torch.autograd.set_detect_anomaly(True), lower the learning rate or clip gradients",
                subject=Subject(module=first),
                evidence={"backward": report.backward, "kind": kind, "parameters": list(report.nonfinite[:20]),
                          "count": len(report.nonfinite)}))
        if report.checked and report.zero_share > self.zero_fraction:
            found.append(GRAD_ZERO.finding(
                f"{len(report.zero)} of {report.checked} parameters in {model} have an all-zero gradient after "
                f"backward {report.backward} ({report.zero_share:.0%} > {self.zero_fraction:.0%}): "
                f"{shorten(report.zero)}; check for .detach()/no_grad on their path to the loss, or dead ReLUs",
                subject=Subject(module=report.zero[0], group=model),
                evidence={"backward": report.backward, "zero_share": report.zero_share, "limit": self.zero_fraction,
                          "parameters": list(report.zero[:20])}))
        if report.missing and (self.require_all or frozenset(report.missing) != self._reported_missing):
            self._reported_missing = frozenset(report.missing)
            found.append(GRAD_MISSING.finding(
                f"{len(report.missing)} parameter(s) of {model} received no gradient in backward {report.backward}: "
                f"{shorten(report.missing)}; remove them, freeze them (requires_grad=False) or connect them to the loss",
                subject=Subject(module=report.missing[0], group=model),
                evidence={"backward": report.backward, "parameters": list(report.missing[:20])},
                severity=Severity.GAP if self.require_all else None))
        return found

