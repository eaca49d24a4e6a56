"""input_contract: a forward pre-hook that checks what the model is fed against what it was trained on.

Declared once, next to the model: ``dtype``, the value ``range`` (NaN/Inf always break it), and the
``layout`` ("NCHW", "NHWC", "NC", ...: the number of axes, and where the channels are). The channel
count comes from ``channels=`` or, when the layout has a C, from the first Conv layer's
``in_channels`` — so an NHWC image fed to an NCHW model is named as such, not as a shape error deep
inside. The range check is a reduction over the input; ``every=N`` checks every N-th call.
"""
from __future__ import annotations

import math
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapcheck.codes.guards import INPUT_CONTRACT
from gapcheck.errors import UsageError
from gapcheck.findings import Subject
from gapcheck.guards.base import Guarded, InputContractError, Ledger, Mode, check_every

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ContractBreach:
    call: int
    what: str  # "dtype" | "range" | "layout" | "type"
    message: str


def _first_conv_channels(model: Any) -> int | None:
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.modules.conv._ConvNd):
            return int(module.in_channels)
    return None


class InputContract(Guarded, AbstractContextManager["InputContract"]):
    """The hook's state: calls seen, breaches, and ``remove()`` (also a context manager)."""

    def __init__(self, model: "torch.nn.Module", *, dtype: "torch.dtype | None" = None,
                 range: tuple[float, float] | None = None, layout: str | None = None,  # noqa: A002 - the issue's name
                 channels: int | None = None, argument: int | str = 0, every: int = 1,
                 mode: Mode | str = Mode.RAISE) -> None:
        if range is not None and not (range[0] <= range[1]):
            raise UsageError(f"range must be (low, high) with low <= high, got {range}")
        if layout is not None and (not layout.isalpha() or len(set(layout.upper())) != len(layout)):
            raise UsageError(f"layout must be axis letters such as 'NCHW', got {layout!r}")
        self.model = model
        self.dtype = dtype
        self.range = range
        self.layout = layout.upper() if layout else None
        self.channels = channels if channels is not None or not self.layout or "C" not in self.layout \
            else _first_conv_channels(model)
        self.argument = argument
        self.every = check_every(every)
        self.ledger = Ledger(Mode.parse(mode), InputContractError)
        self.calls = 0
        self.breaches: list[ContractBreach] = []
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def remove(self) -> None:
        self._handle.remove()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _hook(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls += 1
        if (self.calls - 1) % self.every:
            return
        value = self._argument_value(module, args, kwargs)
        problem = self._problem(value)
        if problem is not None:
            what, message = problem
            name = type(self.model).__name__
            if len(self.breaches) < 100:  # bounded, like the ledger's findings
                self.breaches.append(ContractBreach(self.calls, what, message))
            self.ledger.report(INPUT_CONTRACT.finding(
                f"input {self.argument!r} of {name} (call {self.calls}) {message}",
                subject=Subject(module=name, output=str(self.argument), step=what),
                evidence={"call": self.calls, "check": what}))

    def _argument_value(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The watched input, whether it came by position or by keyword (HF models are called with keywords)."""
        if isinstance(self.argument, int):
            if self.argument < len(args):
                return args[self.argument]
            if kwargs:  # model(input_ids=...): position 0 does not exist; the contract was declared by position
                raise UsageError(
                    f"input_contract watches positional input {self.argument} of {type(self.model).__name__}, but it "
                    f"was called with keyword arguments ({', '.join(sorted(kwargs))}): declare "
                    f"argument={next(iter(kwargs))!r} (the keyword to check)")
            return None
        if self.argument in kwargs:
            return kwargs[self.argument]
        import inspect

        try:  # model(ids) with the contract declared as argument="input_ids"
            return inspect.signature(module.forward).bind_partial(*args).arguments.get(self.argument)
        except (TypeError, ValueError):
            return None

    def _problem(self, value: Any) -> tuple[str, str] | None:
        import torch

        if not isinstance(value, torch.Tensor):
            return "type", f"is {type(value).__name__}, not a tensor"
        if self.dtype is not None and value.dtype != self.dtype:
            return "dtype", (f"has dtype {value.dtype}, the contract says {self.dtype}: cast in the data pipeline "
                             "(e.g. x.float()) or fix the preprocessing")
        if self.layout is not None:
            problem = self._layout_problem(tuple(value.shape))
            if problem:
                return "layout", problem
        if self.range is not None and value.numel():
            if value.is_complex():
                return "range", "is complex: a range contract needs real values"
            integer = not value.is_floating_point()
            # integers (token ids, labels) are compared as they are: through float32 ids above 2^24 would round
            low, high = (float(v) for v in torch.aminmax(value.detach() if integer and value.dtype != torch.bool
                                                         else value.detach().float()))
            if not (math.isfinite(low) and math.isfinite(high)):  # NaN propagates into aminmax
                return "range", "holds NaN or Inf: check the data and the preprocessing for divisions by zero"
            if low < self.range[0] or high > self.range[1]:
                advice = ("ids outside the vocabulary or class range: check the tokenizer's vocab_size, special "
                          "tokens and the label mapping" if integer
                          else "is the normalization (ToTensor, Normalize, /255) missing or applied twice?")
                return "range", (f"spans [{low:g}, {high:g}], the contract says [{self.range[0]:g}, "
                                 f"{self.range[1]:g}]: {advice}")
        return None

    def _layout_problem(self, shape: tuple[int, ...]) -> str | None:
        layout = self.layout or ""
        if len(shape) != len(layout):
            return f"has {len(shape)} axes {shape}, the contract's layout {layout} has {len(layout)}"
        if self.channels is None or "C" not in layout:
            return None
        axis = layout.index("C")
        if shape[axis] == self.channels:
            return None
        other = [i for i, size in enumerate(shape) if size == self.channels and i != axis]
        hint = f" — it looks channels-{'last' if other and other[-1] == len(shape) - 1 else 'moved'}: permute it" \
            if other else ""
        return f"has shape {shape}: {layout} expects {self.channels} channels on axis {axis}, got {shape[axis]}{hint}"


def input_contract(model: "torch.nn.Module", *, dtype: "torch.dtype | None" = None,
                   range: tuple[float, float] | None = None, layout: str | None = None,  # noqa: A002
                   channels: int | None = None, argument: int | str = 0, every: int = 1,
                   mode: Mode | str = Mode.RAISE) -> InputContract:
    """Register a forward pre-hook on ``model`` that checks its input; returns the handle (``.remove()``)."""
    return InputContract(model, dtype=dtype, range=range, layout=layout, channels=channels, argument=argument,
                         every=every, mode=mode)
