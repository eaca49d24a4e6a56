"""Which module owns the ONNX node where an error starts, in a graph without trustworthy names.

A tool that rewrote the file (onnxslim, ONNX Runtime's optimizer, a scope stripper) leaves a LayerNorm, a GELU
or a ConvNeXt ``LayerNorm2d`` (Transpose -> LayerNormalization -> Transpose) without a name or a value of its
own: the first divergence is then seen at the next module that has one. Here the nodes upstream of that value
(or of a locally diverging subgraph) are classified by their values, as ONNX Runtime computed them:

* **correct**: equal, under the noise-aware tolerance, to a tensor torch also has (a module's input or output);
* **off**: not correct, but near the output of a module of the same shape (within :data:`OWNER_RELATIVE_ERROR`
  of it, or pointing the same way: :data:`OWNER_COSINE`);
* **unknown**: neither (a Transpose, a reshape for a Gemm, the inside of a decomposed GELU).

The error starts at the first *off* value (graph order) whose own inputs lead back, through unknown values only,
to correct ones, and whose error is never undone downstream (a decomposed GELU's ``x / sqrt(2)`` is near many
things but its GELU is correct). It belongs to the nearest module (then the first to finish) that finishes, in
torch, after those correct values exist, and whose torch input is one of them or the sum of two of them (a
residual sum that a SkipLayerNormalization computes inside itself). This runs only on a run that already
diverges: it can move where a gap is reported, never make one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gapcheck.backends.torch_eager import CaptureResult
from gapcheck.compare import TolerancePolicy, compare_arrays
from gapcheck.export_diff.calls import module_of
from gapcheck.model.mapping import GraphIndex

#: How far an unnamed node's output may be from a module's output and still be that module computed otherwise (a
#: ReLU exported where torch has LeakyReLU(0.1) is ~0.1 off, an epsilon of 0.1 ~5%); a sibling fed the same input
#: (query vs key) is O(1).
OWNER_RELATIVE_ERROR = 0.5
#: ... or at least this cosine similarity with it: a normalization's epsilon changes each row's scale, which is O(1)
#: in relative terms on small activations but leaves the direction (GPT-2's LayerNorm with eps 0.1: cosine 0.99+).
OWNER_COSINE = 0.95
_LAYOUT = ("Transpose", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten", "Cast", "Expand")
#: Nodes walked back from a diverging value: a module's own ops (a decomposed LayerNorm is ~10) fit many times.
REGION_LIMIT = 64


@dataclass(frozen=True)
class Owner:
    module: str
    value: str  # the ONNX value where the error starts
    op_type: str  # its main op (layout ops such as the Transposes around a LayerNorm2d's LayerNormalization aside)
    nodes: tuple[int, ...]  # the nodes computing it from torch-equal values: the module's ops in this file
    relative_error: float  # max |onnx - torch| / max |torch| at that value


def merged(array: np.ndarray) -> np.ndarray:
    """``array`` with its leading axes merged, [windows, tokens, C] -> [windows x tokens, C]: a Linear on [..., C] as
    an exporter writes it, a Gemm between two Reshapes (Swin's window attention, every dynamo-exported transformer).
    The same elements in the same order; 2-D and smaller as it is."""
    return array.reshape(-1, array.shape[-1]) if array.ndim > 2 else array


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    if actual.shape != expected.shape:
        actual, expected = merged(actual), merged(expected)
    if actual.shape != expected.shape or not expected.size:
        return float("inf")
    with np.errstate(invalid="ignore", over="ignore"):
        worst = float(np.nanmax(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
    scale = float(np.max(np.abs(expected)))
    return worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))


def region(index: GraphIndex, value: str, limit: int = REGION_LIMIT) -> list[int]:
    """Node ids upstream of ``value`` (itself included), nearest first, at most ``limit``, Constants aside."""
    nodes = index.model.graph.node
    found: list[int] = []
    queue = [value]
    while queue and len(found) < limit:
        producer = index.producer.get(queue.pop(0))
        if producer is None or producer in found or nodes[producer].op_type == "Constant":
            continue
        found.append(producer)
        queue.extend(n for n in nodes[producer].input if n and n not in index.initializers)
    return found


def region_values(index: GraphIndex, node_ids: list[int]) -> list[str]:
    """Every value the nodes read or write (initializers aside): what ONNX Runtime must hand back."""
    nodes = index.model.graph.node
    names = [n for i in node_ids for n in (*nodes[i].input, *nodes[i].output) if n and n not in index.initializers]
    return list(dict.fromkeys(names))


@dataclass
class _Torch:
    """torch's tensors of one sample by shape: (module, 'input'|'output', array, order); each also by its
    :func:`merged` shape, so a Gemm's [windows x tokens, C] value is compared with the Linear's [windows, tokens, C]
    (before, such values were all *unknown*: Swin's attn.qkv and attn.proj had no owner)."""

    by_shape: dict[tuple[int, ...], list[tuple[str, str, np.ndarray, int]]]

    @classmethod
    def of(cls, capture: CaptureResult) -> _Torch:
        by_shape: dict[tuple[int, ...], list[tuple[str, str, np.ndarray, int]]] = {}
        for path, captured in capture.modules.items():
            tensors = [("output", captured.output)] if captured.output is not None else []
            tensors += [("input", t) for t in captured.inputs]
            for kind, array in tensors:
                if np.issubdtype(array.dtype, np.floating):
                    by_shape.setdefault(tuple(array.shape), []).append((path, kind, array, captured.order))
                    if array.ndim > 2:
                        flat = merged(array)
                        by_shape.setdefault(tuple(flat.shape), []).append((path, kind, flat, captured.order))
        return cls(by_shape)


class _Classifier:
    def __init__(self, torch_tensors: _Torch, policy: TolerancePolicy, noise: dict[str, float],
                 correct: set[str]) -> None:
        self.torch, self.policy, self.noise, self.known = torch_tensors, policy, noise, correct
        self._correct: dict[str, bool] = {}

    def correct(self, name: str, array: np.ndarray) -> bool:
        if name in self.known or not np.issubdtype(array.dtype, np.floating):
            return True  # graph inputs, torch-fed values; shapes and indices are not where float error starts
        if name not in self._correct:
            self._correct[name] = any(
                compare_arrays(array, t, self.policy.for_name(p, t.dtype, self.noise.get(p))).passed
                for p, _, t, _ in self.torch.by_shape.get(tuple(array.shape), ()))
        return self._correct[name]

    def near(self, array: np.ndarray) -> list[tuple[float, int, str]]:
        """(1 - cosine, order, module) of the module outputs ``array`` is near (see OWNER_RELATIVE_ERROR and
        OWNER_COSINE), nearest first, then the first to finish."""
        fits = []
        for path, kind, t, order in self.torch.by_shape.get(tuple(array.shape), ()):
            if kind != "output":
                continue
            cosine = _cosine(array, t)
            if cosine >= OWNER_COSINE or relative_error(array, t) <= OWNER_RELATIVE_ERROR:
                fits.append((1.0 - cosine, order, path))
        return sorted(fits)

    def produced_after(self, values: list[np.ndarray]) -> int:
        """The torch order after which every one of ``values`` exists: a module computing from them finishes later."""
        bound = -1
        for array in values:
            orders = [order for _, kind, t, order in self.torch.by_shape.get(tuple(array.shape), ())
                      if kind == "output" and _same(array, t)]
            bound = max(bound, min(orders, default=-1))
        return bound


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    return float(np.dot(x, y)) / norm if norm > 0 and np.isfinite(norm) else 0.0


#: ONNX Runtime's fused ops that add a Linear's bias themselves, and the input position of that bias
BIAS_INPUT = {"BiasGelu": 1, "FastGelu": 1, "BiasAdd": 1, "SkipLayerNormalization": 4,
               "SkipSimplifiedLayerNormalization": 3}


def before_bias(index: GraphIndex, value: str) -> bool:
    """Whether ``value`` is a product whose bias a fused op adds (a MatMul before BiasGelu/SkipLayerNormalization):
    near the Linear's output by the bias, but no divergence; unknown, never *off*."""
    nodes = index.model.graph.node
    for i in index.consumers.get(value, ()):
        node = nodes[i]
        position = BIAS_INPUT.get(node.op_type)
        if position is not None and len(node.input) > position and node.input[0] == value \
                and node.input[position] in index.initializers:
            return True
    return False


def find_owner(index: GraphIndex, node_ids: list[int], values: dict[str, np.ndarray], capture: CaptureResult,
               policy: TolerancePolicy, noise: dict[str, float], correct: frozenset[str] | set[str] = frozenset()
               ) -> Owner | None:
    """The module owning the node among ``node_ids`` where the error starts (see the module docstring); ``values``
    are ONNX Runtime's values of the region, ``correct`` names values known to be torch's own (the fed ones)."""
    nodes = index.model.graph.node
    members = set(node_ids)
    classify = _Classifier(_Torch.of(capture), policy, noise, set(correct))
    for i in sorted(members):
        for out in nodes[i].output:
            array = values.get(out)
            if array is None or classify.correct(out, array) or before_bias(index, out):
                continue
            near = classify.near(array)
            if not near:
                continue
            walked = _boundary(index, out, members, values, classify)
            if walked is None or _undone(index, out, members, values, classify):
                continue
            boundary, ops = walked
            owner = _pick(near, boundary, capture, values, classify)
            if owner is not None:
                torch_out = capture.modules[owner[2]].output
                rel = relative_error(array, torch_out) if torch_out is not None else float("nan")
                main = [nodes[k].op_type for k in sorted(ops) if nodes[k].op_type not in _LAYOUT] or [nodes[i].op_type]
                return Owner(module_of(owner[2]), out, main[-1], tuple(sorted(ops)), rel)
    return None


def _boundary(index: GraphIndex, value: str, members: set[int], values: dict[str, np.ndarray],
              classify: _Classifier) -> tuple[list[str], list[int]] | None:
    """The correct values ``value`` is computed from through unknown ones, and the nodes in between; None when an
    off value or the region's edge is met first (the error starts earlier, or cannot be told)."""
    nodes = index.model.graph.node
    found: list[str] = []
    walked: list[int] = []
    stack, seen = [value], {value}
    while stack:
        producer = index.producer.get(stack.pop())
        if producer is None or producer not in members:
            return None
        walked.append(producer)
        for name in nodes[producer].input:
            if not name or name in seen or name in index.initializers:
                continue
            seen.add(name)
            source = index.producer.get(name)
            if source is not None and nodes[source].op_type == "Constant":
                continue
            array = values.get(name)
            if array is None:
                return None
            if classify.correct(name, array):
                found.append(name)
            elif classify.near(array) and not before_bias(index, name):
                return None  # an earlier value is already off: the error starts there
            else:
                stack.append(name)
    return found, walked


def _undone(index: GraphIndex, value: str, members: set[int], values: dict[str, np.ndarray],
            classify: _Classifier) -> bool:
    """Whether a value computed from ``value`` inside the region is correct again (an intermediate of a correct op)."""
    nodes = index.model.graph.node
    stack, seen = [value], set()
    while stack:
        for i in index.consumers.get(stack.pop(), ()):
            if i not in members:
                continue
            for out in nodes[i].output:
                if out and out not in seen and out in values:
                    seen.add(out)
                    if classify.correct(out, values[out]):
                        return True
                    stack.append(out)
    return False


def _pick(near: list[tuple[float, int, str]], boundary: list[str], capture: CaptureResult,
          values: dict[str, np.ndarray], classify: _Classifier) -> tuple[float, int, str] | None:
    """The nearest module that finishes after the boundary values exist in torch and whose torch input is one of
    them, or the sum of two of them (a residual sum that a SkipLayerNormalization computes inside itself)."""
    edge = [values[n] for n in boundary if np.issubdtype(values[n].dtype, np.floating)]
    fed = edge + [a + b for k, a in enumerate(edge) for b in edge[k + 1:] if a.shape == b.shape]
    after = classify.produced_after(edge)
    for fit in near:
        inputs = [t for t in capture.modules[fit[2]].inputs if np.issubdtype(t.dtype, np.floating)]
        if fit[1] > after and any(_same(t, b) for t in inputs for b in fed):
            return fit
    return None


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        a, b = merged(a), merged(b)
    return a.shape == b.shape and relative_error(a, b) <= 1e-3
