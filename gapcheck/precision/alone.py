"""INT8's other sensitivity measure: the model's output error when *only one module* is quantized.

Quantizing one module at a time would cost one quantization and one session per module. Instead one *splice model*
is built from the FP32 model and the fully quantized one, and run once per sample: for each module, a renamed copy
of its quantized ops (walked back in the quantized graph from the dequantized value its consumers read, down to the
FP32 values other modules produce: its input Q/DQ, its weights' DQ, its compute ops) fed the FP32 values, then a
renamed copy of the FP32 ops downstream of it, fed that value instead of the FP32 one. Every copy reads the FP32
model's values by their names, so nothing is fed twice; the copies' outputs are the model's outputs with only that
module quantized. The error is the relative L2 error (``||q - f|| / ||f||`` over the flattened float outputs), the
worst over the samples. A module hands on one value here (its last, as the local measure); its other values stay FP32.
If ONNX Runtime refuses the splice model, each module is spliced alone (one session each), and a module that cannot
be spliced (a value the quantized model lacks, a subgraph attribute) has no measure.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import onnx

from gapcheck.errors import BackendError, condense_error
from gapcheck.precision.graph import Graph, ValueRunner, value_map

log = logging.getLogger(__name__)
PREFIX = "gapcheck.alone"


def output_errors(graph: Graph, quantized: onnx.ModelProto, units: dict[str, tuple[list[str], list[str]]],
                  samples: Sequence[dict[str, np.ndarray]]) -> dict[str, float]:
    """Owner module -> relative L2 error of the model's outputs with only its own ops quantized (see the module
    docstring); ``units`` are :func:`gapcheck.precision.int8._units`'s."""
    from gapcheck.precision.int8 import _relative, after_qdq

    targets = {**value_map(graph.model, quantized, by_node=False), **after_qdq(quantized)}
    spliced = {owner: handed[0] for owner, (handed, _) in units.items() if handed[0] in targets}
    runners = _runners(graph, quantized, targets, spliced)
    outputs = [o.name for o in graph.model.graph.output]
    errors: dict[str, float] = {}
    for feeds in samples:
        for runner, made in runners:
            values = runner.run(feeds)
            reference = _flat(values, outputs)
            for owner, names in made.items():
                if all(n in values for n in names):
                    errors[owner] = max(errors.get(owner, 0.0), _relative(_flat(values, names), reference))
    return errors


def _flat(values: dict[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
    return np.concatenate([values[n].astype(np.float64).ravel() for n in names if values[n].dtype.kind == "f"]
                          or [np.zeros(0)])


def _runners(graph: Graph, quantized: onnx.ModelProto, targets: dict[str, str],
             spliced: dict[str, str]) -> list[tuple[ValueRunner, dict[str, list[str]]]]:
    """One session for every module, else one per module (see the module docstring)."""
    model, made = splice(graph, quantized, targets, spliced)
    try:
        return [(ValueRunner(model, []), made)]
    except BackendError as exc:
        log.info("the splice model cannot be built (%s); each module is spliced alone", condense_error(exc))
    out = []
    for owner in made:
        one, names = splice(graph, quantized, targets, {owner: spliced[owner]})
        try:
            out.append((ValueRunner(one, []), names))
        except BackendError:
            continue  # no measure for this module
    return out


def splice(graph: Graph, quantized: onnx.ModelProto, targets: dict[str, str],
           spliced: dict[str, str]) -> tuple[onnx.ModelProto, dict[str, list[str]]]:
    """The splice model for ``spliced`` (owner -> the FP32 value it hands on) and, per owner, its output names."""
    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    q_nodes = {o: n for n in quantized.graph.node for o in n.output if o}
    q_inits = {i.name: i for i in quantized.graph.initializer}
    _merge_opsets(model, quantized)
    by_name = {n.name: n for n in graph.model.graph.node}
    producer_owner = {o: owner for owner, names in graph.owners().items() for n in names for o in by_name[n].output}
    fp32_values = set(producer_owner) | set(graph.index.graph_inputs)
    copied_inits: set[str] = set()
    made: dict[str, list[str]] = {}
    for k, (owner, handed) in enumerate(spliced.items()):
        outside = {v for v in fp32_values if producer_owner.get(v) != owner}
        q_part = _walk_back(targets[handed], q_nodes, q_inits, outside)
        if q_part is None:
            continue
        nodes, inits = q_part
        prefix = f"{PREFIX}{k}/"
        rename = {o: prefix + o for n in nodes for o in n.output if o}
        rename.update({i: f"{PREFIX}.q/{i}" for i in inits})
        for name in inits - copied_inits:
            tensor = model.graph.initializer.add()
            tensor.CopyFrom(q_inits[name])
            tensor.name = f"{PREFIX}.q/{name}"
        copied_inits |= inits
        _copy(model, nodes, rename, prefix)
        downstream = _downstream(graph, handed)
        rename = {**{o: prefix + "f/" + o for n in downstream for o in n.output if o},
                  handed: prefix + targets[handed]}
        _copy(model, downstream, rename, prefix + "f/")
        made[owner] = [rename.get(o.name, o.name) for o in graph.model.graph.output]
        for name in made[owner]:
            if name != handed and name not in {o.name for o in model.graph.output}:
                model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return model, made


def _merge_opsets(model: onnx.ModelProto, quantized: onnx.ModelProto) -> None:
    """The quantizer may raise the opset (QDQ per channel needs 13) or add a domain (com.microsoft): the splice model
    runs both models' ops, so it takes each domain's highest version."""
    versions = {o.domain: o.version for o in model.opset_import}
    for o in quantized.opset_import:
        versions[o.domain] = max(versions.get(o.domain, 0), o.version)
    del model.opset_import[:]
    model.opset_import.extend(onnx.helper.make_opsetid(domain, version) for domain, version in versions.items())


def _walk_back(target: str, q_nodes: dict[str, onnx.NodeProto], q_inits: dict[str, onnx.TensorProto],
               outside: set[str]) -> tuple[list[onnx.NodeProto], set[str]] | None:
    """The quantized nodes that compute ``target`` from FP32 values outside the module, in graph order, and the
    quantized initializers they read; None when the walk needs a value it cannot reach or a subgraph."""
    nodes: dict[int, onnx.NodeProto] = {}
    inits: set[str] = set()
    order = {id(n): i for i, n in enumerate(q_nodes.values())}
    stack, seen = [target], set()
    while stack:
        value = stack.pop()
        if value in seen or not value:
            continue
        seen.add(value)
        if value in q_inits:
            inits.add(value)
        elif value in outside and value != target:
            continue  # an FP32 value of another module (or a graph input, a constant): read from the FP32 model
        elif value in q_nodes:
            node = q_nodes[value]
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                return None
            nodes[order[id(node)]] = node
            stack.extend(node.input)
        else:
            return None
    return [nodes[i] for i in sorted(nodes)], inits


def _downstream(graph: Graph, value: str) -> list[onnx.NodeProto]:
    """The FP32 nodes that read ``value`` directly or through other nodes, in graph order."""
    tainted, out = {value}, []
    for node in graph.model.graph.node:
        if tainted & set(node.input):
            out.append(node)
            tainted |= {o for o in node.output if o}
    return out


def _copy(model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto], rename: dict[str, str], prefix: str) -> None:
    for node in nodes:
        copy = model.graph.node.add()
        copy.CopyFrom(node)
        copy.name = prefix + (node.name or node.op_type)
        copy.input[:] = [rename.get(v, v) for v in node.input]
        copy.output[:] = [rename.get(v, v) if v else v for v in node.output]
