"""Modules called several times (ALBERT's shared transformer layer, a ReLU reused in a block): every call compared.

The per-sample comparison compares a module's *last* call (its hooks overwrite the earlier ones, and a module path
maps to one ONNX value). When such a module diverges, the last call says little about where: in ALBERT every call
of the shared layer after the one where an error starts fails too, so the first failing module in torch's order
(by the last calls) is the shared layer's first submodule, whatever changed. Here, on a run that already diverges,
every call of the failing modules is captured, each call is paired with its own ONNX value (the values the
module's nodes hand out of its scope, or the nodes reading its weight, in graph order: one per call), and the
earliest failing (module, call) in torch's execution order is where the error starts.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gapcheck.backends.torch_eager import CaptureResult, ModuleCapture, TorchBackend, hookable
from gapcheck.model.mapping import GraphIndex, ModuleMapping, module_members
from gapcheck.tensors import contiguous


@dataclass(frozen=True)
class Call:
    """One call of a module: its completion order in the forward pass, its index among the module's calls, and its
    output (None when it returns several tensors)."""

    order: int
    index: int
    output: np.ndarray | None
    inputs: tuple[np.ndarray, ...] = ()


#: An earlier call of a module in :func:`every_call`'s capture is keyed ``path + CALL + index``
CALL = "#call"


def _array(value) -> np.ndarray | None:
    if not isinstance(value, torch.Tensor) or value.dtype == torch.bfloat16:
        return None
    return value.detach().clone().cpu().numpy()


def capture_calls(backend: TorchBackend, feeds: dict[str, np.ndarray], paths: Sequence[str],
                  with_inputs: bool = False) -> dict[str, list[Call]]:
    """Every call's output (and tensor inputs, ``with_inputs``) of ``paths`` on one sample (one forward pass)."""
    calls: dict[str, list[Call]] = {p: [] for p in paths}
    counter = iter(range(1 << 30))
    handles = []

    def make_hook(path: str):
        def hook(mod, args, output):
            inputs = tuple(a for a in (_array(x) for x in args) if a is not None) if with_inputs else ()
            calls[path].append(Call(next(counter), len(calls[path]), _array(output), inputs))
        return hook

    wanted = set(paths)
    try:
        for path, submodule in backend.module.named_modules():
            if path in wanted and hookable(submodule):
                handles.append(submodule.register_forward_hook(make_hook(path)))
        args = [torch.from_numpy(contiguous(feeds[n])) for n in backend.input_names]
        with torch.no_grad():
            backend.module(*args)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def call_values(index: GraphIndex, mapping: ModuleMapping, count: int) -> list[str] | None:
    """The ONNX value of each of ``count`` calls of the module, in call order; None when the graph does not show one
    value per call. By scope: the values its nodes hand out of its scope, in graph order (a shared layer's calls are
    computed one after another); by weights (a graph without scopes, where a tool may have renamed the weight): the
    nodes reading the weight its attributed node reads, each carried through its bias Add."""
    nodes = index.model.graph.node
    path = mapping.module
    if mapping.how == "weights":
        named = [n for n in nodes if n.name in mapping.node_names]
        weights = [name for n in named for name in n.input[1:2] if name in index.initializers]
        # onnxslim writes one transposed copy of a shared weight per call: every initializer equal to it counts
        readers = sorted(i for name in _copies(index, weights[0]) for i in index.consumers.get(name, ())) \
            if weights else []
        values = [through_bias(index, nodes[i].output[0]) for i in readers
                  if nodes[i].op_type in ("MatMul", "Gemm", "Conv", "ConvTranspose")]
        return values if len(values) == count else None
    members = module_members(index).get(path, [])
    inside = set(members)
    outputs = set(index.graph_outputs)
    escaping = [name for i in members for name in nodes[i].output
                if name and (name in outputs or index.consumers.get(name, frozenset()) - inside)]
    return escaping if len(escaping) == count else None


def through_bias(index: GraphIndex, value: str) -> str:
    """A Conv/MatMul's value, carried through the Add of a separate bias initializer."""
    nodes = index.model.graph.node
    following = sorted(index.consumers.get(value, ()))
    if len(following) == 1 and nodes[following[0]].op_type == "Add" and any(
            n in index.initializers for n in nodes[following[0]].input if n != value):
        return nodes[following[0]].output[0]
    return value


def every_call(backend: TorchBackend, feeds: dict[str, np.ndarray]) -> CaptureResult:
    """Every hookable module's inputs and output on one sample, every call of it: the last under the module's
    path (as :meth:`TorchBackend.capture` keys it), an earlier one under ``path + CALL + index``."""
    paths = [p for p, m in backend.module.named_modules() if p and hookable(m)]
    modules: dict[str, ModuleCapture] = {}
    for path, calls in capture_calls(backend, feeds, paths, with_inputs=True).items():
        for call in calls:
            key = path if call.index == len(calls) - 1 else f"{path}{CALL}{call.index}"
            modules[key] = ModuleCapture(call.order, call.output, call.inputs, len(calls))
    return CaptureResult({}, modules)


def module_of(key: str) -> str:
    """The module path of an :func:`every_call` key."""
    return key.split(CALL, 1)[0]


def _copies(index: GraphIndex, name: str) -> list[str]:
    """``name`` and every initializer holding the same values (same dims and bytes)."""
    from onnx import numpy_helper

    tensors = {t.name: t for t in index.model.graph.initializer}
    reference = tensors[name]
    array = numpy_helper.to_array(reference)
    return [other for other, t in tensors.items() if other == name or (
        list(t.dims) == list(reference.dims) and t.data_type == reference.data_type
        and np.array_equal(numpy_helper.to_array(t), array))]
