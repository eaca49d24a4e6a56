"""The ONNX graph as the precision passes see it: which module owns each node, every value a run can mark, and one
ONNX Runtime run that returns every float value (what ``qdq_loss_debug`` also does, for any model).

A node belongs to every module whose scope holds it (the module -> node mapping of :mod:`gapcheck.model.mapping`);
its *owner* is the innermost one (``attn.scores`` for the scores' MatMul, ``attn`` for a Softmax written inline in
``attn.forward``, ``""`` for an op of the root module).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.model.mapping import GraphIndex, ModuleMapping, index_graph, map_modules

ROOT = "(model)"  # how reports name ops of the root module


@dataclass(frozen=True)
class Graph:
    model: onnx.ModelProto
    index: GraphIndex
    module_paths: tuple[str, ...]
    mappings: dict[str, ModuleMapping]

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.model.graph.node)

    def owner(self, node_id: int) -> str:
        scopes = self.index.scopes[node_id]
        return scopes[-1] if scopes else ROOT

    def owners(self) -> dict[str, list[str]]:
        """Owner module -> the node names it owns (innermost scope), in graph order."""
        out: dict[str, list[str]] = {}
        for i, node in enumerate(self.model.graph.node):
            out.setdefault(self.owner(i), []).append(node.name)
        return out

    def consumers_of(self, value: str) -> list[str]:
        nodes = self.model.graph.node
        return [nodes[i].name for i in sorted(self.index.consumers.get(value, frozenset()))]

    def producer_of(self, value: str) -> str | None:
        i = self.index.producer.get(value)
        return None if i is None else self.model.graph.node[i].name


def describe(model: onnx.ModelProto, module_paths: Sequence[str]) -> Graph:
    """Index ``model`` against the module paths; every node gets a name (the block lists name nodes)."""
    named = onnx.ModelProto()
    named.CopyFrom(model)
    taken = {n.name for n in named.graph.node if n.name}
    for i, node in enumerate(named.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
    paths = list(module_paths)
    index = index_graph(named, paths)
    return Graph(named, index, tuple(paths), map_modules(named, paths, index))


def value_names(model: onnx.ModelProto) -> list[str]:
    """Every value a node produces (graph outputs included), in graph order."""
    return [name for node in model.graph.node if node.op_type != "Constant" for name in node.output if name]


class ValueRunner:
    """One ONNX Runtime session that returns ``names`` (marked as extra outputs) and the graph outputs."""

    def __init__(self, model: onnx.ModelProto, names: Sequence[str]) -> None:
        outputs = [o.name for o in model.graph.output]
        self.names = list(dict.fromkeys([*names, *outputs]))
        self.backend = OnnxRuntimeBackend(model, extra_outputs=[n for n in self.names if n not in outputs])

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self.backend.infer(feeds, output_names=self.names)
        return {k: v for k, v in values.items() if isinstance(v, np.ndarray)}


def outputs_only(model: onnx.ModelProto) -> ValueRunner:
    return ValueRunner(model, [])


def value_map(original: onnx.ModelProto, converted: onnx.ModelProto, *, by_node: bool = True) -> dict[str, str]:
    """Original value name -> its name in a converted copy: the output of the node of the same name and type (a node
    kept in FP32 by onnxconverter-common writes ``<node>_output_cast_0``, and its old name is an FP16 copy), else the
    same name (dynamic quantization replaces a MatMul by other nodes that write its output name). ``by_node=False``
    prefers the name: a quantized Gather keeps its node name but hands on int8 codes, dequantized under the old name."""
    present = {v for n in converted.graph.node for v in n.output} | {o.name for o in converted.graph.output}
    produced = {n.name: (n.op_type, list(n.output)) for n in converted.graph.node}
    mapping = {}
    for node in original.graph.node:
        op_type, new = produced.get(node.name, ("", []))
        for position, name in enumerate(node.output):
            if by_node and name and op_type == node.op_type and position < len(new) and new[position]:
                mapping[name] = new[position]  # the node's own value (FP32 for a kept node), not its FP16 cast
            elif name in present:
                mapping[name] = name
            elif name and op_type == node.op_type and position < len(new) and new[position]:
                mapping[name] = new[position]
    return mapping
