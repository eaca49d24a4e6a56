"""Does an ONNX file from elsewhere belong to this torch model, and which of its values are which module's?

Only evidence that would hold up counts as "another model": parameters (tensors the graph
names like parameters) whose shapes do not fit the model's, or a different number of outputs.
Scope names do not count: exporters add scopes of
their own (dynamo's shape checks under ``_empty_nn_module_stack_from_metadata_hook``), the
TorchScript exporter renames repeated calls (``relu_1``), and tools like onnxsim strip them.

When a graph carries no scopes at all, modules are attributed by what can be proved: a
module whose weight tensor is found in the graph with the same values (or, changed, under
its own name or with a shape no other weight has) owns the node that consumes it (and the
bias added right after it).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from gapcheck.model.mapping import GraphIndex, ModuleMapping
from gapcheck.tensors import contiguous

# Tensors this small (scales, tiny biases, shape constants) prove nothing about which model a graph is.
_MIN_WEIGHT_ELEMENTS = 16
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


@dataclass(frozen=True)
class ModelFit:
    """Evidence that an ONNX graph was exported from another model (empty when it fits)."""

    evidence: tuple[str, ...] = ()
    details: dict = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return not self.evidence


def _weight_tensors(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """Float initializers and Constant tensors of at least two dims and a few dozen elements: the weights."""
    tensors = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    tensors[node.output[0]] = attr.t
    return {
        name: t for name, t in tensors.items()
        if t.data_type in _FLOAT_TYPES and len(t.dims) >= 2 and int(np.prod(t.dims)) >= _MIN_WEIGHT_ELEMENTS
    }


def _shape_forms(shape: tuple[int, ...]) -> set[tuple[int, ...]]:
    """A shape and the forms exporters give the same weight: transposed (Linear as MatMul), unit dims dropped."""
    squeezed = tuple(d for d in shape if d != 1)
    return {shape, tuple(reversed(shape)), squeezed, tuple(reversed(squeezed))}


def _torch_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    named: dict[str, torch.Tensor] = dict(module.named_parameters())
    named.update(dict(module.named_buffers()))
    return {n: t for n, t in named.items() if t.is_floating_point() and t.dim() >= 2 and t.numel() >= _MIN_WEIGHT_ELEMENTS}


# An initializer named like a module's parameter ("layer1.0.conv1.weight"): both exporters and the simplifiers keep
# these names for tensors they did not fold. Folded constants get names of their own ("unsqueeze_1", "onnx::Conv_7").
_PARAMETER_NAME = re.compile(
    r"^[A-Za-z_][\w]*(\.[\w]+)*\.(weight|bias|running_mean|running_var|[\w]*(table|embedding|token|bias|scale|gamma|beta|weight)[\w]*)$"
)


def check_fit(model: onnx.ModelProto, module: torch.nn.Module, torch_outputs: int,
              unknown_scopes: tuple[str, ...] = ()) -> ModelFit:
    """Evidence, one sentence each, that ``model`` was exported from another model than ``module``.

    Counted: a tensor named like one of the model's parameters but shaped otherwise; tensors named like
    parameters the model does not have, of shapes no parameter of the model has; a different number of outputs.
    Not counted: the model's parameters missing from the graph (exporters fold BatchNorms into Convs and
    precompute tables such as Swin's relative position bias), constants of the exporter's own, scope names.
    ``unknown_scopes`` (scopes naming no module) are kept in the details as context only.
    """
    params = {n: tuple(t.shape) for n, t in list(module.named_parameters()) + list(module.named_buffers())}
    shape_forms = set().union(*(_shape_forms(s) for s in params.values())) if params else set()
    reshaped, foreign = {}, {}
    for tensor in model.graph.initializer:
        shape = tuple(int(d) for d in tensor.dims)
        if tensor.name in params:
            if not _shape_forms(shape) & _shape_forms(params[tensor.name]):
                reshaped[tensor.name] = (shape, params[tensor.name])
        elif _PARAMETER_NAME.match(tensor.name) and tensor.data_type in _FLOAT_TYPES and len(shape) >= 1 \
                and not _shape_forms(shape) & shape_forms:
            foreign[tensor.name] = shape
    evidence = []
    if reshaped:
        listed = ", ".join(f"{n} is {list(a)} in the graph, {list(b)} in the model" for n, (a, b) in list(reshaped.items())[:3])
        evidence.append(f"{len(reshaped)} parameters have other shapes ({listed}{', ...' if len(reshaped) > 3 else ''})")
    if foreign:
        listed = ", ".join(f"{n} {list(s)}" for n, s in list(foreign.items())[:3])
        evidence.append(f"{len(foreign)} parameters the model does not have, of shapes none of its parameters has "
                        f"({listed}{', ...' if len(foreign) > 3 else ''})")
    outputs = len(model.graph.output)
    if outputs != torch_outputs:
        evidence.append(f"the graph has {outputs} outputs, the model returns {torch_outputs} tensors")
    details = {
        "parameters_reshaped": {n: {"onnx": list(a), "model": list(b)} for n, (a, b) in reshaped.items()},
        "parameters_not_in_model": {n: list(s) for n, s in foreign.items()},
        "onnx_outputs": outputs, "model_outputs": torch_outputs,
        "unknown_modules": list(unknown_scopes),
    }
    return ModelFit(tuple(evidence), details)


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(contiguous(array, dtype=np.float32).tobytes()).hexdigest()


def _by_name_or_unique_shape(onnx_weights: dict[str, onnx.TensorProto], torch_weights: dict[str, torch.Tensor],
                             owned: set[str], matched: set[str]) -> dict[str, str]:
    """Weights whose values changed (the defect to find) but that are still recognizable.

    By name (simplifiers keep initializer names), else by a shape exactly one remaining tensor on each side has.
    """
    def owner_of(param: str) -> str:
        return param.rsplit(".", 1)[0] if "." in param else ""

    remaining_onnx = {n: tuple(t.dims) for n, t in onnx_weights.items() if n not in matched}
    remaining_torch = {n: tuple(t.shape) for n, t in torch_weights.items() if owner_of(n) not in owned}
    found = {n: owner_of(n) for n in remaining_onnx if n in remaining_torch and remaining_onnx[n] == remaining_torch[n]}
    for onnx_name, shape in remaining_onnx.items():
        if onnx_name in found:
            continue
        same_onnx = [n for n, s in remaining_onnx.items() if _shape_forms(s) & _shape_forms(shape)]
        same_torch = [n for n, s in remaining_torch.items() if _shape_forms(s) & _shape_forms(shape)]
        if len(same_onnx) == 1 and len(same_torch) == 1:
            found[onnx_name] = owner_of(same_torch[0])
    return {n: o for n, o in found.items() if o}


def attribute_by_weights(model: onnx.ModelProto, module: torch.nn.Module, index: GraphIndex) -> dict[str, ModuleMapping]:
    """Modules whose weight is in the graph with the same values, mapped to the node that consumes it.

    For graphs without scopes. A weight is recognized by its values, else (its values changed: the defect to
    find) by its name or by a shape only it has. A module's value is the output of the first node reading its weight,
    carried through a following Add/Mul that reads another tensor of the same module (its bias).
    """
    by_digest: dict[tuple[tuple[int, ...], str], str] = {}
    for name, tensor in _torch_weights(module).items():
        array = tensor.detach().cpu().float().numpy()
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        by_digest.setdefault((array.shape, _digest(array)), owner)
        if array.ndim == 2:
            by_digest.setdefault((array.T.shape, _digest(array.T)), owner)
    owners: dict[str, str] = {}  # ONNX tensor name -> module path
    onnx_weights = _weight_tensors(model)
    for name, tensor in onnx_weights.items():
        array = numpy_helper.to_array(tensor)
        found = by_digest.get((array.shape, _digest(array)))
        if found:
            owners[name] = found
    owners.update(_by_name_or_unique_shape(onnx_weights, _torch_weights(module), set(owners.values()), set(owners)))
    biases = {
        name.rsplit(".", 1)[0]: _digest(t.detach().cpu().float().numpy())
        for name, t in module.named_parameters() if name.endswith("bias") and t.dim() == 1
    }
    initializers = {t.name: t for t in model.graph.initializer}
    nodes = model.graph.node
    result: dict[str, ModuleMapping] = {}
    for tensor_name, owner in owners.items():
        if owner in result or not owner:
            continue
        readers = sorted(index.consumers.get(tensor_name, ()))
        if not readers:
            producer = index.producer.get(tensor_name)  # a Constant node: its consumers read its output
            readers = sorted(index.consumers.get(nodes[producer].output[0], ())) if producer is not None else []
        if not readers:
            continue
        node_id = readers[0]
        ids = [node_id]
        value = nodes[node_id].output[0]
        following = sorted(index.consumers.get(value, ()))
        if len(following) == 1 and nodes[following[0]].op_type in ("Add", "Mul"):
            bias_inputs = [initializers[n] for n in nodes[following[0]].input if n != value and n in initializers]
            if owner in biases and any(_digest(numpy_helper.to_array(t)) == biases[owner] for t in bias_inputs):
                ids.append(following[0])
                value = nodes[following[0]].output[0]
        result[owner] = ModuleMapping(
            module=owner, value=value, op_types=tuple(dict.fromkeys(nodes[i].op_type for i in ids)),
            node_names=tuple(nodes[i].name for i in ids), source=None, how="weights",
        )
    return result
