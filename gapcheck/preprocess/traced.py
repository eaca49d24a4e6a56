"""Steps from callables: a preprocessing stage written as Python code, split into observable steps.

Declared step lists (``recipe.py``) name their steps; a stage written as a function, a
``torch.nn.Sequential`` or a torchvision ``Compose`` does not. This module recovers the steps:

1. **Composed pipelines** (anything with a ``.transforms`` list, or ``nn.Sequential``): each item is
   a step, labelled by its own ``repr`` (torchvision's reprs carry their parameters, e.g.
   ``Resize(size=[224], interpolation=InterpolationMode.BILINEAR, antialias=True)``); an item that
   is an ``nn.Module`` on tensors is split further (2 or 3).
2. **torch.fx** symbolic tracing, for modules and functions whose input is a tensor: each graph
   node (call_function / call_method / call_module) is a step.
3. **Runtime recording** when fx cannot trace (the code calls PIL or OpenCV, branches on values,
   or takes a path): a ``TorchFunctionMode`` records every top-level torch call and its output
   while the stage runs on the real sample. Whatever runs before the first torch call (decoding,
   PIL/OpenCV resizing) is one **opaque** part, observed only at its end (the array handed to
   torch), and the trace says so with the reason fx fell back.

Every step's output is kept as an array, so it can be fingerprinted and summarized like a
declared step; :func:`first_divergent_traced_step` names the first step where two stages stop
agreeing (within a tolerance, so equivalent float orderings are not called divergent).

What one trace keeps is bounded (:data:`MAX_TRACED_STEPS`, :data:`MAX_TRACED_BYTES`, checked before
each copy is made): past the cap the stage still runs to its end, but no further output is kept, the
trace is marked ``truncated`` and an opaque part says "recorded the first N steps; the rest was not
traced: over the memory cap". The recorded steps are a prefix of the stage, so a divergence among
them is still named; one past them is not (the stage is then observed only at its output).
"""
from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gapcheck.errors import one_line

# Parameters whose defaults matter for a diagnosis; shown even when the caller left them implicit.
_SALIENT_DEFAULTS: dict[str, dict[str, Any]] = {
    "interpolate": {"mode": "nearest", "antialias": False, "align_corners": None},
    "resize": {"antialias": True},
}
# What one stage's trace may keep. Every recorded step is a full copy of an intermediate array, held in the
# auditing process until both stages are traced and aligned: unbounded, a stage looping ``x = x * 1.0`` 600 times
# on a 256×256 image doubled the audit's peak memory (417 → 874 MB), and 1000 such ops on a 1024² image would
# need ~12 GB. Real pipelines have tens of steps; 256 MiB holds ~220 float32 steps of a 3×224×224 image or ~21
# of a 3×1024×1024 one. (Aligning by value adds float64 views of the distinct steps: up to 2× this for float32.)
MAX_TRACED_STEPS = 256
BOUNDARY_LABEL = "tensor from the decoded array (boundary)"
OUTPUT_LABEL = "the stage's output (after its last torch call)"
OUTPUT_ONLY_LABEL = "the stage's output (it makes no torch call)"
MAX_TRACED_BYTES = 256 * 2**20

_SKIPPED = {"size", "dim", "numel", "__get__", "__len__", "is_floating_point", "is_contiguous", "element_size",
            "stride", "data_ptr", "__bool__", "__format__", "__repr__", "tolist", "item"}


@dataclass(frozen=True)
class TracedStep:
    index: int  # 1-based
    label: str
    output: np.ndarray


@dataclass(frozen=True)
class StageTrace:
    steps: tuple[TracedStep, ...]
    method: str  # "compose" | "fx" | "runtime"
    opaque: tuple[str, ...] = ()  # parts observed only at their boundaries
    reason: str = ""  # why fx was not used, when it was not
    truncated: bool = False  # over the memory cap: the steps are only the first ones (see MAX_TRACED_STEPS)
    # what each step produced, where ``steps`` hold a view made for aligning (a step list's BGR images in RGB order);
    # summaries and fingerprints are of these. Empty: the steps' outputs are what was produced.
    produced: tuple[np.ndarray, ...] = ()

    def labels(self) -> list[str]:
        return [step.label for step in self.steps]


@dataclass(frozen=True)
class TracedDivergence:
    step_index: int
    ref_step: str
    cand_step: str
    max_abs: float | None  # None when shapes/dtypes differ


def array_nbytes(value: Any) -> int | None:
    """What :func:`as_array` would allocate for ``value``, without allocating; None when it is not an array."""
    if hasattr(value, "detach") and hasattr(value, "numel"):
        itemsize = 4 if str(value.dtype) == "torch.bfloat16" else int(value.element_size())
        return int(value.numel()) * itemsize
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if type(value).__module__.startswith("PIL.") and hasattr(value, "getbands"):
        mode = str(getattr(value, "mode", ""))
        itemsize = 4 if mode in ("I", "F") else 2 if mode.startswith("I;16") else 1
        width, height = value.size
        return int(width) * int(height) * len(value.getbands()) * itemsize
    return None


class _Budget:
    """How many steps and bytes a trace has kept, against MAX_TRACED_STEPS / MAX_TRACED_BYTES (read when used)."""

    def __init__(self, steps: int | None = None, nbytes: int | None = None) -> None:
        self.max_steps = MAX_TRACED_STEPS if steps is None else steps
        self.max_bytes = MAX_TRACED_BYTES if nbytes is None else nbytes
        self.steps = 0
        self.bytes = 0
        self.full = False  # once over the cap, nothing more is kept: the kept steps stay a prefix of the stage
        self.untraced = 0  # outputs seen after that, not kept

    def admit(self, value: Any) -> np.ndarray | None:
        """``value`` as an array when it fits (checked before copying); None when it is not an array or is over."""
        nbytes = array_nbytes(value)
        if nbytes is None:
            return None
        if self.full or self.steps + 1 > self.max_steps or self.bytes + nbytes > self.max_bytes:
            self.full = True
            self.untraced += 1
            return None
        array = as_array(value)
        if array is not None:
            self.steps += 1
            self.bytes += int(array.nbytes)
        return array

    def child(self) -> "_Budget":
        """What is left of this budget, for a trace that may be kept or dropped (see :meth:`absorb`)."""
        return _Budget(self.max_steps - self.steps, self.max_bytes - self.bytes)

    def absorb(self, child: "_Budget") -> None:
        self.steps += child.steps
        self.bytes += child.bytes
        self.full = self.full or child.full
        self.untraced += child.untraced

    def note(self) -> str | None:
        if not self.full:
            return None
        more = f" ({self.untraced} more output(s))" if self.untraced else ""
        return (f"recorded the first {self.steps} steps; the rest{more} was not traced: over the memory cap "
                f"({MAX_TRACED_STEPS} steps / {MAX_TRACED_BYTES // 2**20} MiB per stage), so it is observed only "
                "at the stage's output")


def as_array(value: Any) -> np.ndarray | None:
    """A step output as an array (tensor, PIL image, ndarray); None for anything else."""
    if hasattr(value, "detach"):
        return value.detach().cpu().float().numpy() if value.dtype.is_floating_point and str(value.dtype) == "torch.bfloat16" \
            else value.detach().cpu().numpy().copy()
    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value).__module__.startswith("PIL."):
        return np.asarray(value).copy()
    return None


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)) and len(value) <= 6:
        return "(" + ", ".join(_format_value(v) for v in value) + (",)" if len(value) == 1 else ")")
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _constant_text(value: Any) -> str | None:
    """A small constant tensor operand (a mean, a std) as its values; None for anything else."""
    if hasattr(value, "numel") and hasattr(value, "detach") and value.numel() <= 8:
        return _format_value([round(float(v), 6) for v in value.detach().reshape(-1).tolist()])
    return None


def _label(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    shown = {**_SALIENT_DEFAULTS.get(name, {}),
             **{k: v for k, v in kwargs.items() if v is not None or k in _SALIENT_DEFAULTS.get(name, {})}}
    scalars = [_format_value(a) if isinstance(a, (int, float, bool, str, tuple, list)) else _constant_text(a)
               for a in args[1:]]
    params = [text for text in scalars if text is not None]
    params += [f"{k}={_format_value(v)}" for k, v in shown.items() if not hasattr(v, "shape")]
    return f"{name}({', '.join(params)})"


def _func_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    return name.rsplit(".", 1)[-1]


class _Constants:
    """Tensors made from no data (``torch.tensor(MEAN)``, a view of it), by id. Held weakly, so a stage that makes
    many (a fresh canvas per call) does not have them all kept alive; a dead one's id is dropped as it dies, before
    the id can be reused."""

    def __init__(self) -> None:
        self._refs: dict[int, Any] = {}

    def __contains__(self, tensor: Any) -> bool:
        ref = self._refs.get(id(tensor))
        return ref is not None and (ref() if callable(ref) else ref) is tensor

    def add(self, tensor: Any) -> None:
        key = id(tensor)

        def forget(_ref: Any) -> None:
            self._refs.pop(key, None)

        try:
            self._refs[key] = weakref.ref(tensor, forget)
        except TypeError:  # pragma: no cover - a tensor type without weak references: kept alive, as before
            self._refs[key] = tensor


# A tensor the stage did not make from the image, with at most this many values, is a constant operand (timm's
# Normalize keeps its mean and std as tensors made at import time), not a second entry of the image data.
CONSTANT_MAX_VALUES = 16


class _RuntimeTrace:
    """The top-level torch calls of one stage call that return a tensor, recorded within ``budget``; the first data
    tensor torch sees (made from the decoded array) is recorded first, as the boundary.

    Data is the boundary and what is computed from it (``derived``), or a large tensor from elsewhere (the image
    back from numpy); a small tensor from elsewhere is a constant. Without that, the steps on a Normalize's mean and
    std (``as_tensor``, ``std == 0``, ``view``) were recorded, and two stages that agree on those constants were
    aligned there instead of at the image."""

    def __init__(self, budget: _Budget) -> None:
        import torch

        self.tensor_type = torch.Tensor
        self.budget = budget
        self.recorded: list[tuple[str, np.ndarray]] = []
        self.constants = _Constants()
        self.derived = _Constants()
        self.seen_data = False

    def _is_data(self, tensor: Any) -> bool:
        if tensor in self.derived:
            return True
        if tensor in self.constants:
            return False
        return not self.seen_data or int(tensor.numel()) > CONSTANT_MAX_VALUES

    def _tensors(self, value: Any) -> list[Any]:
        if isinstance(value, self.tensor_type):
            return [value]
        if isinstance(value, (list, tuple)):
            return [t for item in value for t in self._tensors(item)]
        return []

    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        data = [t for t in self._tensors(list(args)) + self._tensors(list(kwargs.values())) if self._is_data(t)]
        if not self.seen_data and data:
            self.seen_data = True
            boundary = self.budget.admit(data[0])
            if boundary is not None:
                self.recorded.append((BOUNDARY_LABEL, boundary))
        out = func(*args, **kwargs)
        if isinstance(out, self.tensor_type) and not data:
            self.constants.add(out)
            return out
        for tensor in self._tensors(out) + data:
            self.derived.add(tensor)
        name = _func_name(func)
        if isinstance(out, self.tensor_type) and name not in _SKIPPED:
            array = self.budget.admit(out)  # None once over the cap: counted there, not copied
            if array is not None:
                self.recorded.append((_label(name, tuple(args), kwargs), array))
        return out


def _record_runtime(fn: Callable[[Any], Any], sample: Any, budget: _Budget | None = None
                    ) -> tuple[list[tuple[str, np.ndarray]], Any]:
    """Run ``fn(sample)`` recording every top-level torch call that returns a tensor (within ``budget``)."""
    from torch.overrides import TorchFunctionMode

    trace = _RuntimeTrace(budget if budget is not None else _Budget())

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return trace.call(func, tuple(args), kwargs or {})

    with Recorder():
        result = fn(sample)
    return trace.recorded, result


def _trace_fx(module: Any, value: Any, budget: _Budget | None = None) -> list[tuple[str, np.ndarray]]:
    """Each fx graph node of ``module`` applied to ``value`` (a tensor), with its output (within ``budget``)."""
    import torch
    import torch.fx

    budget = budget if budget is not None else _Budget()
    graph_module = module if isinstance(module, torch.fx.GraphModule) else torch.fx.symbolic_trace(module)
    recorded: list[tuple[str, np.ndarray]] = []

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):  # type: ignore[no-untyped-def]
            out = super().run_node(node)
            if node.op in ("call_function", "call_method", "call_module") and isinstance(out, torch.Tensor):
                target = node.target if isinstance(node.target, str) else _func_name(node.target)
                if node.op == "call_module":
                    target = f"{node.target}: {type(graph_module.get_submodule(node.target)).__name__}"
                args = tuple(a for a in node.args if not isinstance(a, torch.fx.Node))
                kwargs = {k: v for k, v in node.kwargs.items() if not isinstance(v, torch.fx.Node)}
                array = budget.admit(out)
                if array is not None:
                    recorded.append((_label(target, (None, *args), kwargs), array))
            return out

    with torch.no_grad():
        Recorder(graph_module).run(value)
    return recorded


def _items(fn: Any) -> list[Any] | None:
    items = getattr(fn, "transforms", None)
    if isinstance(items, (list, tuple)):
        return list(items)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if isinstance(fn, torch.nn.Sequential):
        return list(fn)
    return None


def trace_stage(fn: Callable[[Any], Any], sample: Any) -> StageTrace:
    """Split ``fn`` applied to ``sample`` into steps (see the module docstring for how)."""
    items = _items(fn)
    if items is not None:
        return _trace_composed(items, sample)
    if _is_tensor(sample):
        budget = _Budget()
        try:
            steps = _trace_fx(fn, sample, budget)
            return _finish(steps, "fx", (), budget=budget)
        except Exception as exc:  # noqa: BLE001 - fx refuses much real code; we fall back and say why
            reason = f"torch.fx could not trace it: {one_line(exc)}"
    else:
        reason = "its input is not a tensor (a path, bytes or an image), so torch.fx cannot trace it"
    budget = _Budget()  # a fresh one: what a failed fx attempt kept is dropped
    steps, result = _record_runtime(fn, sample, budget)
    _add_output(steps, result, budget)
    opaque = () if _is_tensor(sample) else ("everything before the first torch call (decoding, PIL/OpenCV steps) "
                                            "is observed only at its end",)
    return _finish(steps, "runtime", opaque, reason, budget)


def _add_output(steps: list[tuple[str, np.ndarray]], result: Any, budget: _Budget) -> None:
    """The stage's result as a last step when the recorded torch calls do not end with it: a stage that works in
    numpy and only wraps the result (``torch.from_numpy``, no recorded call) would otherwise have no step at all,
    and one that finishes in numpy would end at a value it does not return."""
    if budget.full or array_nbytes(result) is None:
        return
    last = steps[-1][1] if steps else None
    nbytes = array_nbytes(result)
    if last is not None and nbytes == last.nbytes:
        output = as_array(result)
        if output is not None and output.shape == last.shape and output.dtype == last.dtype \
                and np.array_equal(output, last, equal_nan=output.dtype.kind in "fc"):
            return
    array = budget.admit(result)
    if array is not None:
        steps.append((OUTPUT_LABEL if steps else OUTPUT_ONLY_LABEL, array))


def _trace_composed(items: list[Any], sample: Any) -> StageTrace:
    steps: list[tuple[str, np.ndarray]] = []
    opaque: list[str] = []
    budget = _Budget()
    value = sample
    for item in items:
        label = _item_label(item)
        inner: list[tuple[str, np.ndarray]] = []
        inner_budget = budget.child()  # kept only if the item is split into its fx nodes
        if _is_module(item) and _is_tensor(value) and not budget.full:
            try:
                inner = _trace_fx(item, value, inner_budget)
            except Exception:  # noqa: BLE001 - not traceable: the item stays one step
                inner = []
        value = item(value)
        if len(inner) > 1:
            budget.absorb(inner_budget)
            steps.extend((f"{label} › {inner_label}", out) for inner_label, out in inner)
            continue
        del inner  # not split: the item's output is its one step
        if array_nbytes(value) is None:
            opaque.append(f"{label} (its output is a {type(value).__name__}, not an array)")
            continue
        array = budget.admit(value)
        if array is not None:
            steps.append((label, array))
    return _finish(steps, "compose", tuple(opaque), budget=budget)


def _item_label(item: Any) -> str:
    """A composed item's repr (torchvision's carry their parameters); a plain function by name (no address)."""
    if inspect.isfunction(item) or inspect.isbuiltin(item) or inspect.ismethod(item):
        return getattr(item, "__qualname__", getattr(item, "__name__", "function"))
    return " ".join(repr(item).split())


def _finish(steps: list[tuple[str, np.ndarray]], method: str, opaque: tuple[str, ...], reason: str = "",
            budget: _Budget | None = None) -> StageTrace:
    note = budget.note() if budget is not None else None
    return StageTrace(tuple(TracedStep(i + 1, label, out) for i, (label, out) in enumerate(steps)), method,
                      opaque + ((note,) if note else ()), reason, truncated=note is not None)


def unrecorded_label(trace: StageTrace) -> str:
    """What a truncated trace did after its recorded steps, as a step label (see :data:`MAX_TRACED_STEPS`)."""
    return (f"(no change through its recorded step {len(trace.steps)}; the rest was not traced: over the memory "
            "cap)")


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "detach") and hasattr(value, "dtype")


def _is_module(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "forward") or hasattr(value, "named_modules")


def _effective(trace: StageTrace) -> list[TracedStep]:
    """Drop steps whose output equals the previous one (copies, contiguous, no-op conversions)."""
    kept: list[TracedStep] = []
    for step in trace.steps:
        if kept and _same(kept[-1].output, step.output, exact=True):
            continue
        kept.append(step)
    return kept


def _same(a: np.ndarray, b: np.ndarray, exact: bool = False, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    if a.shape != b.shape:
        return False
    if exact:
        return a.dtype == b.dtype and np.array_equal(a, b)
    scale = max(float(np.abs(b).max()) if b.size else 0.0, 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol * scale,
                                equal_nan=True))


def first_divergent_traced_step(ref: StageTrace, cand: StageTrace) -> TracedDivergence | None:
    """The first step (of the candidate) whose output no longer agrees with the reference's step at the same depth."""
    ref_steps, cand_steps = _effective(ref), _effective(cand)
    for ref_step, cand_step in zip(ref_steps, cand_steps):
        if not _same(cand_step.output, ref_step.output):
            max_abs = None
            if cand_step.output.shape == ref_step.output.shape:
                max_abs = float(np.max(np.abs(cand_step.output.astype(np.float64) - ref_step.output.astype(np.float64))))
            return TracedDivergence(cand_step.index, ref_step.label, cand_step.label, max_abs)
    if len(ref_steps) != len(cand_steps):
        shorter = min(len(ref_steps), len(cand_steps))
        if cand.truncated and shorter == len(cand_steps):
            return None  # the candidate did not end: it stopped being recorded (memory cap); the rest is unknown
        if ref.truncated and shorter == len(ref_steps):
            # the reference stopped being recorded: the candidate's next change is a divergence only within the
            # reference's recorded depth (through which the reference changed nothing more)
            if cand_steps[shorter].index > len(ref.steps):
                return None
            return TracedDivergence(cand_steps[shorter].index, unrecorded_label(ref), cand_steps[shorter].label, None)
        ref_label = ref_steps[shorter].label if shorter < len(ref_steps) else "(end)"
        cand_index, cand_label = ((cand_steps[shorter].index, cand_steps[shorter].label) if shorter < len(cand_steps)
                                  else (len(cand.steps) + 1, "(end)"))
        return TracedDivergence(cand_index, ref_label, cand_label, None)
    return None
