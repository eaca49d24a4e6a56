"""TensorHealth: the first unit test every model deserves — forward and backward produce finite values,
and every parameter that should train receives a gradient.

``TensorHealth().check(model, x)`` runs ``model(x)``, checks every floating-point tensor in the output
(nested tuples, lists, dicts, dataclass-like objects with tensor attributes are walked), backpropagates
``loss_fn(output)`` (default: the sum of the floating-point outputs) and checks the gradients with
:class:`~gapcheck.guards.gradients.GradientHealth` (``require_all=True``: a parameter without a gradient is
a violation). The pytest fixture ``tensor_health`` hands out one of these.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapcheck.codes.guards import OUTPUT_NONFINITE
from gapcheck.errors import UsageError
from gapcheck.findings import Subject
from gapcheck.guards.base import Guarded, Ledger, Mode, NonFiniteError, shorten
from gapcheck.guards.gradients import GradientHealth, GradientReport

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class HealthReport:
    outputs: int  # floating-point tensors checked in the output
    nonfinite_outputs: tuple[str, ...]
    gradients: GradientReport | None

    @property
    def ok(self) -> bool:
        return not self.nonfinite_outputs and (self.gradients is None or self.gradients.ok)

    def __bool__(self) -> bool:
        return self.ok


def tensors_in(value: Any, path: str = "output", depth: int = 0) -> Iterator[tuple[str, "torch.Tensor"]]:
    """Every tensor in a (nested) output, with a path such as ``output['logits']`` or ``output[1]``."""
    import torch

    if depth > 8:  # outputs are shallow; a deep structure is a cycle or not an output
        return
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensors_in(item, f"{path}[{key!r}]", depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from tensors_in(item, f"{path}[{index}]", depth + 1)
    elif hasattr(value, "__dict__") and not callable(value):  # ModelOutput-like containers
        for key, item in vars(value).items():
            if not key.startswith("_"):
                yield from tensors_in(item, f"{path}.{key}", depth + 1)


class TensorHealth(Guarded):
    """Finite forward, finite backward, a gradient for every trainable parameter."""

    def __init__(self, mode: Mode | str = Mode.RAISE) -> None:
        self.mode = Mode.parse(mode)
        self.ledger = Ledger(self.mode, NonFiniteError)

    def assert_finite(self, value: Any, name: str = "output") -> tuple[str, ...]:
        """Raise (or warn) when any floating-point tensor in ``value`` holds NaN/Inf; return the paths that do."""
        import torch

        found = tuple(path for path, t in tensors_in(value, name)
                      if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t.detach()).all()))
        if found:
            self.ledger.report(OUTPUT_NONFINITE.finding(
                f"{len(found)} tensor(s) hold NaN or Inf: {shorten(list(found))}; find the first module whose output "
                "is non-finite and fix its numerics or initialisation",
                subject=Subject(output=found[0]), evidence={"tensors": list(found[:20])}))
        return found

    def check(self, model: "torch.nn.Module", *inputs: Any, loss_fn: Callable[[Any], "torch.Tensor"] | None = None,
              backward: bool = True, **kwargs: Any) -> HealthReport:
        """Forward ``inputs`` through ``model``, check the outputs, then (``backward``) the gradients."""
        model.zero_grad(set_to_none=True)  # "no gradient" must mean this backward gave none
        output = model(*inputs, **kwargs)
        floats = [t for _, t in tensors_in(output) if t.is_floating_point()]
        nonfinite = self.assert_finite(output)
        gradients = None
        if backward:
            loss = loss_fn(output) if loss_fn is not None else _default_loss(floats)
            health = GradientHealth(model, zero_fraction=1.0, require_all=True, mode=self.mode)
            loss.backward()
            try:
                gradients = health.check()
            finally:  # one account of everything this object checked
                self.ledger.findings += health.ledger.findings
                self.ledger.violations += health.ledger.violations
        return HealthReport(outputs=len(floats), nonfinite_outputs=nonfinite, gradients=gradients)


def _default_loss(floats: list["torch.Tensor"]) -> "torch.Tensor":
    trainable = [t for t in floats if t.requires_grad]
    if not trainable:
        raise UsageError("the model's output has no tensor that requires grad; pass loss_fn= or backward=False")
    return sum((t.float().sum() for t in trainable[1:]), trainable[0].float().sum())
