"""Reduced-precision variants of an ONNX model: what an FP16 deployment would compute."""
from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

import onnx

from gapcheck.errors import UsageError

log = logging.getLogger(__name__)
PRECISIONS = ("fp32", "fp16", "bf16")
FP16_MAX = 65504.0


def to_precision(model: onnx.ModelProto, precision: str, keep_fp32: Sequence[str] = ()) -> onnx.ModelProto:
    """The model converted to ``precision`` with its input/output types kept (so the same feeds work).

    ``keep_fp32`` names nodes that stay in FP32 (onnxconverter-common's ``node_block_list``: casts are inserted
    around them); the model given is never changed.
    """
    if precision == "fp32":
        return model
    if precision == "fp16":
        from onnxconverter_common import float16  # only needed for this mode

        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # the converter edits a model it does not shape-infer in place
        model = copy
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "values truncated to fp16" warnings: the point of the check
            # max_finite_val: the converter's default (1e4) clamps constants that FP16 holds exactly (a divisor
            # of 20,000 became 10,000); a deployment's FP16 conversion keeps every value up to 65504.
            converted = float16.convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=False,
                                                         max_finite_val=FP16_MAX,
                                                         node_block_list=list(keep_fp32) or None)
        retype_casts(converted)
        read_fp16_outputs(converted)
        if not keep_fp32:
            return converted
        restore_fp32_constants(converted, model, set(keep_fp32))
        restore_output_types(converted, model)
        return drop_round_trips(converted)
    if precision == "bf16":
        raise UsageError(
            "precision bf16 is not available: ONNX Runtime's CPU execution provider has no bfloat16 kernels for "
            "most operators, so there is no runtime here to run what a bf16 deployment computes",
            hint="use precision fp16, or compare on the deployment's own runtime (e.g. a Triton endpoint)",
            parameter="precision",
        )
    raise UsageError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}", parameter="precision")


def _float_constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """The FP32 initializers and Constant-node tensors of the original model, by value name."""
    found = {t.name: t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    for node in model.graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value" \
                and node.attribute[0].t.data_type == onnx.TensorProto.FLOAT:
            found[node.output[0]] = node.attribute[0].t
    return found


def restore_fp32_constants(converted: onnx.ModelProto, original: onnx.ModelProto, keep_fp32: set[str]) -> None:
    """A node kept in FP32 reads its constants at their original FP32 value, not clamped to FP16 and cast back.

    onnxconverter-common puts the input Casts in front of a blocked node before it decides which initializers
    to keep in FP32 (those read directly by a blocked node), so a constant of 1e5 feeding a blocked Mul is clamped to
    65504 and cast up again: the node kept in FP32 to hold large values computes with the wrong constant.
    """
    constants = _float_constants(original)
    by_output = {o: n for n in converted.graph.node for o in n.output}
    names = {t.name for t in converted.graph.initializer}
    for node in converted.graph.node:
        if node.name not in keep_fp32:
            continue
        for i, name in enumerate(node.input):
            cast = by_output.get(name)
            if cast is None or cast.op_type != "Cast" or cast.input[0] not in constants:
                continue
            restored = f"{cast.input[0]}_fp32"
            if restored not in names:
                tensor = onnx.TensorProto()
                tensor.CopyFrom(constants[cast.input[0]])
                tensor.name = restored
                converted.graph.initializer.append(tensor)
                names.add(restored)
            node.input[i] = restored
    _prune_unused(converted)


def restore_output_types(converted: onnx.ModelProto, original: onnx.ModelProto) -> None:
    """Graph outputs stay FP32 (keep_io_types) when a node kept in FP32 produces one.

    onnxconverter-common's Cast after a blocked node retypes the graph output itself to FP16, and its I/O pass then
    sees no FP32 output to cast back: the output became FP16 and a value beyond 65504 came out as Inf.
    """
    was_float = {o.name for o in original.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    by_output = {o: n for n in converted.graph.node for o in n.output}
    for output in converted.graph.output:
        if output.name not in was_float or output.type.tensor_type.elem_type != onnx.TensorProto.FLOAT16:
            continue
        output.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        stale = [v for v in converted.graph.value_info if v.name == output.name]
        for info in stale:  # an FP16 value_info of the output name would contradict the output's type
            converted.graph.value_info.remove(info)
        producer = by_output.get(output.name)
        half = f"{output.name}_fp16"
        for node in converted.graph.node:  # the FP16 value renamed (consumers inside the graph still read it)
            node.input[:] = [half if i == output.name else i for i in node.input]
            node.output[:] = [half if o == output.name else o for o in node.output]
        # The output reads what the Cast to FP16 read (a kept node's FP32 value: no Inf), else the FP16 value.
        source = producer.input[0] if producer is not None and producer.op_type == "Cast" else half
        converted.graph.node.append(onnx.helper.make_node("Cast", [source], [output.name], f"{output.name}_cast_fp32",
                                                          to=onnx.TensorProto.FLOAT))
    _prune_unused(converted)


def _prune_unused(model: onnx.ModelProto) -> None:
    """Drop Casts and initializers that nothing reads any more (the clamped FP16 copies of restored constants)."""
    graph = model.graph
    used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}
    keep = [n for n in graph.node if not (n.op_type == "Cast" and n.output[0] not in used)]
    if len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)
    used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output} | {i.name for i in graph.input}
    inits = [t for t in graph.initializer if t.name in used]  # one listed as a graph input stays: else it is required
    if len(inits) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(inits)


def read_fp16_outputs(model: onnx.ModelProto) -> None:
    """A node inside the graph that reads a graph output kept FP32 (keep_io_types) reads its FP16 value instead.

    onnxconverter-common puts a Cast to FP32 in front of each graph output but leaves the graph's other readers of
    that name in place, typed FP16: the dynamo export of a BERT reads ``last_hidden_state`` again for the pooler
    (``hidden_states[:, 0]``, a Gather), and ONNX Runtime refused the model ("Type (tensor(float16)) of output arg
    (select) ... does not match expected type (tensor(float))").
    """
    outputs = {o.name for o in model.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    fp16 = {v.name for v in model.graph.value_info if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    half = {}
    for node in model.graph.node:  # only the converter's output casts: an FP16 value cast to the FP32 output
        if node.op_type == "Cast" and node.output[0] in outputs and node.input[0] in fp16 and \
                any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in node.attribute):
            half[node.output[0]] = node.input[0]
    if not half:
        return
    for node in model.graph.node:
        if node.op_type == "Cast" and node.output[0] in half:
            continue
        node.input[:] = [half.get(name, name) for name in node.input]


def retype_casts(model: onnx.ModelProto) -> None:
    """A Cast to FP32 whose output the converter typed FP16 is made a Cast to FP16.

    onnxconverter-common retypes every float value to FP16 but leaves a Cast from an integer (an attention mask's
    ``.to(torch.float32)``) casting to FP32; ONNX Runtime then refuses the model ("Type (tensor(float16)) of output
    arg ... does not match expected type (tensor(float))"), as it would for any BERT with a mask.
    """
    typed = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.value_info, *model.graph.output]}
    for node in model.graph.node:
        if node.op_type != "Cast" or typed.get(node.output[0]) != onnx.TensorProto.FLOAT16:
            continue
        for attribute in node.attribute:
            if attribute.name == "to" and attribute.i == onnx.TensorProto.FLOAT:
                attribute.i = onnx.TensorProto.FLOAT16


def drop_round_trips(model: onnx.ModelProto) -> onnx.ModelProto:
    """Remove FP32 -> FP16 -> FP32 cast pairs between two nodes kept in FP32.

    onnxconverter-common casts every output of a blocked node back to FP16 and removes the pair again only when the
    value has one consumer; a value with several (a residual stream) keeps the round trip, and a value beyond 65504
    comes back as Inf — exactly what keeping the node in FP32 was to prevent. Consumers read the FP32 value instead.
    """
    nodes = list(model.graph.node)
    to = {n.name: next((a.i for a in n.attribute if a.name == "to"), None) for n in nodes if n.op_type == "Cast"}
    by_output = {o: n for n in nodes for o in n.output}
    replace: dict[str, str] = {}
    for node in nodes:
        if node.op_type != "Cast" or to.get(node.name) != onnx.TensorProto.FLOAT:
            continue
        source = by_output.get(node.input[0])
        if source is not None and source.op_type == "Cast" and to.get(source.name) == onnx.TensorProto.FLOAT16 \
                and source.name.endswith(tuple(f"_output_cast{i}" for i in range(8))):
            replace[node.output[0]] = source.input[0]
    if not replace:
        return model
    for node in nodes:
        for i, name in enumerate(node.input):
            if name in replace:
                node.input[i] = replace[name]
    outputs = {o.name for o in model.graph.output}
    used = {name for n in nodes for name in n.input} | outputs
    keep = [n for n in nodes if not (n.op_type == "Cast" and n.output[0] not in used)]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return model
