"""EvalGuard: validate in eval mode without gradients, and prove the validation left the model as it found it.

On entry it records every module's ``training`` flag and snapshots the normalization statistics (every
buffer named ``running_mean``, ``running_var`` or ``num_batches_tracked``: BatchNorm, SyncBatchNorm,
InstanceNorm with tracked stats, and custom layers that follow the convention), then puts the model
in eval mode and disables autograd. On exit it reports

- statistics that changed: the validation ran (partly) in train mode, and the validation data is now
  in the statistics the model will use at inference (BatchNorm pollution);
- modules in train mode: something called ``.train()`` inside the block;

and restores each module's own flag (not just the root's: a model with frozen BatchNorm in eval
inside a training model comes back exactly as it was). ``set_eval=False`` only watches, for code
(Lightning, a trainer) that switches modes itself.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapcheck.codes.guards import BN_POLLUTION, EVAL_TRAIN_MODE
from gapcheck.findings import Finding, Subject
from gapcheck.guards.base import EvalModeError, Guarded, Ledger, Mode, shorten

if TYPE_CHECKING:
    import torch

_STAT_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


@dataclass(frozen=True)
class EvalReport:
    """What one guarded validation did to the model."""

    changed_buffers: tuple[str, ...]
    train_mode_modules: tuple[str, ...]
    watched_buffers: int

    @property
    def ok(self) -> bool:
        return not self.changed_buffers and not self.train_mode_modules

    def __bool__(self) -> bool:
        return self.ok


def _stat_buffers(model: "torch.nn.Module") -> dict[str, "torch.Tensor"]:
    return {name: buf for name, buf in model.named_buffers() if name.rsplit(".", 1)[-1] in _STAT_BUFFERS}


def _same(now: "torch.Tensor", before: "torch.Tensor") -> bool:
    """Bit-for-bit unchanged, NaN equal to NaN: statistics that were already NaN did not change in validation."""
    import torch

    if now.shape != before.shape or now.dtype != before.dtype:
        return False
    if not now.is_floating_point():
        return torch.equal(now, before)
    return bool(((now == before) | (now.isnan() & before.isnan())).all())


class EvalGuard(Guarded):
    """``with EvalGuard(model): validate(...)``: eval + no_grad inside, BN statistics and modes checked on exit."""

    def __init__(self, model: "torch.nn.Module", *, set_eval: bool = True, no_grad: bool = True,
                 mode: Mode | str = Mode.RAISE) -> None:
        self.model = model
        self.set_eval = set_eval
        self.no_grad = no_grad
        self.ledger = Ledger(Mode.parse(mode), EvalModeError)
        self.last: EvalReport | None = None
        self._modes: list[tuple[Any, bool]] = []
        self._snapshot: dict[str, "torch.Tensor"] = {}
        self._grad: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()

    def __enter__(self) -> "EvalGuard":
        import torch

        self._modes = [(module, module.training) for module in self.model.modules()]
        self._snapshot = {name: buf.detach().clone() for name, buf in _stat_buffers(self.model).items()}
        if self.set_eval:
            self.model.eval()
        self._grad = torch.no_grad() if self.no_grad else contextlib.nullcontext()
        self._grad.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._grad.__exit__(exc_type, exc, tb)
        try:
            report = self._inspect()
        finally:
            for module, training in self._modes:
                module.training = training  # the recorded flag exactly; .train() would recurse into children
            self._modes, self._snapshot = [], {}
        self.last = report
        if exc_type is None:  # never mask the block's own exception with ours
            self.ledger.report(*self._findings(report))

    def _inspect(self) -> EvalReport:

        current = _stat_buffers(self.model)
        changed = tuple(name for name, before in self._snapshot.items()
                        if name in current and not _same(current[name], before))
        expected = {id(m): (False if self.set_eval else training) for m, training in self._modes}
        # With set_eval=False a module that trains by design is no finding; one switched to train inside is.
        train_mode = tuple(name or type(module).__name__ for name, module in self.model.named_modules()
                           if module.training and not expected.get(id(module), False))
        return EvalReport(changed_buffers=changed, train_mode_modules=train_mode, watched_buffers=len(self._snapshot))

    def _findings(self, report: EvalReport) -> list[Finding]:
        model = type(self.model).__name__
        found = []
        if report.changed_buffers:
            layers = sorted({name.rsplit(".", 1)[0] for name in report.changed_buffers})
            found.append(BN_POLLUTION.finding(
                f"validation changed the normalization statistics of {len(layers)} layer(s) of {model}: "
                f"{shorten(layers)}; it ran in train mode — call model.eval() first and no .train() inside validation",
                subject=Subject(module=layers[0], group=model),
                evidence={"buffers": list(report.changed_buffers[:20]), "layers": len(layers)}))
        if report.train_mode_modules:
            found.append(EVAL_TRAIN_MODE.finding(
                f"{len(report.train_mode_modules)} module(s) of {model} were in train mode at the end of validation: "
                f"{shorten(report.train_mode_modules)}; something called .train() inside the validation block",
                subject=Subject(module=report.train_mode_modules[0], group=model),
                evidence={"modules": list(report.train_mode_modules[:20])}))
        return found
