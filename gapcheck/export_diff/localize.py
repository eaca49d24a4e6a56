"""Local vs inherited error: re-run one module's ONNX subgraph fed with torch's own values.

If the module's ONNX ops, fed exactly what torch fed the module, still disagree
with torch's output, the module *introduces* the error (local). If they agree, the
error arrived with its inputs (inherited) and the module only passed it on.
"""
from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass

import numpy as np
import onnx

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import TorchBackend, hookable
from gapcheck.compare import ErrorStats, Tolerance, compare_arrays
from gapcheck.errors import BackendError
from gapcheck.export_diff.blame import differences
from gapcheck.export_diff.result import FAIL, FirstDivergence
from gapcheck.model.mapping import GraphIndex, module_members
from gapcheck.tensors import contiguous

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Localization:
    cause: str  # "local", "inherited" or "unknown"
    local: ErrorStats | None
    input_max_abs: float | None
    culprit_value: str | None  # for inherited errors: the diverging input value
    culprit_source: str | None
    note: str


def module_boundary(index: GraphIndex, module: str) -> tuple[list[int], list[str]]:
    """Node ids of ``module`` and the dynamic values flowing into them from outside."""
    nodes = index.model.graph.node
    members = module_members(index).get(module, [])
    produced = {name for i in members for name in nodes[i].output}
    external = []
    for i in members:
        for name in nodes[i].input:
            if not name or name in produced or name in index.initializers or name in external:
                continue
            producer = index.producer.get(name)
            if producer is not None and nodes[producer].op_type == "Constant":
                continue
            external.append(name)
    return members, external


def extract_subgraph(model: onnx.ModelProto, index: GraphIndex, inputs: dict[str, np.ndarray], output: str) -> onnx.ModelProto:
    """The nodes between ``inputs`` and ``output`` as a standalone model, inputs typed from the arrays fed."""
    nodes = model.graph.node
    needed: list[int] = []
    stack, seen = [output], set()
    while stack:
        name = stack.pop()
        if name in seen or name in inputs or name in index.initializers or not name:
            continue
        seen.add(name)
        producer = index.producer.get(name)
        if producer is None:
            raise BackendError(f"cannot cut a subgraph for {output!r}: value {name!r} is not produced in the graph")
        if producer not in needed:
            needed.append(producer)
            stack.extend(nodes[producer].input)
            # Subgraph attributes (If/Loop bodies) may read outer values.
            for attr in nodes[producer].attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.extend(n for sub in attr.g.node for n in sub.input)
    used = {n for i in needed for n in nodes[i].input}
    graph = onnx.helper.make_graph(
        [nodes[i] for i in sorted(needed)],
        "gapcheck_module_subgraph",
        [onnx.helper.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
         for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=output)],
        [init for init in model.graph.initializer if init.name in used or init.name in seen],
    )
    sub = onnx.helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    sub.functions.extend(model.functions)
    return sub


def localize(
    model: onnx.ModelProto,
    index: GraphIndex,
    module: str,
    output_value: str,
    torch_output: np.ndarray,
    torch_values: dict[str, np.ndarray],
    ort_values: dict[str, np.ndarray],
    torch_module_inputs: tuple[np.ndarray, ...],
    tol: Tolerance,
) -> Localization:
    """Decide local vs inherited for ``module``.

    ``torch_values`` maps ONNX value names to torch's tensor for the same value
    (graph inputs and mapped module outputs); ``ort_values`` holds ONNX Runtime's
    values for the same names (and for any other value it computed).
    """
    _, external = module_boundary(index, module)
    feeds: dict[str, np.ndarray] = {}
    unmatched_args = list(torch_module_inputs)
    notes = []
    for name in external:
        value = torch_values.get(name)
        if value is None:
            # Not a module output: match one of the module's own arguments by shape, else use ONNX Runtime's value.
            candidates = [a for a in unmatched_args if name in ort_values and a.shape == ort_values[name].shape]
            if len(candidates) == 1:
                value = candidates[0]
                unmatched_args = [a for a in unmatched_args if a is not value]
            elif name in ort_values and not np.issubdtype(ort_values[name].dtype, np.floating):
                value = ort_values[name]  # shapes, indices: not where float error comes from
            else:
                return Localization("unknown", None, None, None, None, f"cannot tell which torch value feeds {name!r}")
        if name in ort_values and ort_values[name].dtype != value.dtype:
            value = value.astype(ort_values[name].dtype)  # e.g. the FP16 model's internal values
        feeds[name] = contiguous(value)
    try:
        sub = extract_subgraph(model, index, feeds, output_value)
        result = OnnxRuntimeBackend(sub, name="onnxruntime-subgraph").infer(feeds)[output_value]
    except BackendError as exc:
        log.debug("localization subgraph failed: %s", exc)
        return Localization("unknown", None, None, None, None, f"the module's subgraph could not be run alone: {exc}")
    local = compare_arrays(result.astype(np.float32) if result.dtype == np.float16 else result, torch_output, tol)
    input_errors = {
        name: float(np.max(np.abs(ort_values[name].astype(np.float64) - feeds[name].astype(np.float64))))
        for name in feeds
        if name in ort_values and ort_values[name].shape == feeds[name].shape and np.issubdtype(feeds[name].dtype, np.floating)
    }
    input_max = max(input_errors.values(), default=0.0)
    culprit = max(input_errors, key=input_errors.get) if input_errors and input_max > 0 else None
    culprit_source = None
    if culprit is not None and culprit in index.producer:
        culprit_source = index.sources[index.producer[culprit]]
    if not local.passed:
        notes.append("its ONNX ops disagree with torch even when fed torch's own inputs")
        return Localization("local", local, input_max, None, None, "; ".join(notes))
    notes.append("its ONNX ops match torch when fed torch's inputs: the error arrives with its inputs")
    return Localization("inherited", local, input_max, culprit, culprit_source, "; ".join(notes))


def module_source(module) -> str | None:
    """file:line of the module class's forward, for exporters that record no stack traces."""
    from gapcheck.backends.torch_eager import hookable

    if not hookable(module):
        return None  # a ScriptModule's forward is compiled; its class has no Python source to point at
    try:
        forward = type(module).forward
        return f"{inspect.getsourcefile(forward)}:{inspect.getsourcelines(forward)[1]}"
    except (TypeError, OSError, AttributeError):
        return None


def first_divergence(layers, mappings, index: GraphIndex, test_model, torch_backend: TorchBackend, samples, policy,
                      noise: dict[str, float], groups=None) -> FirstDivergence | None:
    """Where the first failing module's error comes from; ``groups`` are fused groups by first member
    (:class:`~gapcheck.export_diff.align.FusedGroup`)."""
    failing = [layer for layer in layers if layer.status == FAIL]
    if not failing:
        return None
    layer = failing[0]
    mapping = mappings[layer.module]
    sample = layer.worst_sample or 0
    if mapping.how in ("group", "value") or not module_members(index).get(mapping.owner):
        return _by_values(layer, mappings, index, test_model, torch_backend, samples[sample], sample, policy, noise,
                          (groups or {}).get(layer.module))
    feeds = samples[sample]
    mapped_paths = [p for p, m in mappings.items() if m.mapped]
    capture = torch_backend.capture(feeds, modules=mapped_paths, inputs_of=[layer.module])
    torch_values = {name: feeds[name] for name in feeds}
    for path in mapped_paths:
        captured = capture.modules.get(path)
        if captured is not None and captured.output is not None:
            torch_values[mappings[path].value] = captured.output
    # ONNX Runtime's own values for everything that crosses into the module (one more run, this sample only).
    # A folded BatchNorm's value is computed by its Conv's nodes: the Conv's scope is the boundary.
    _, external = module_boundary(index, mapping.owner)
    wanted = [n for n in dict.fromkeys(external + [mapping.value]) if n not in feeds]
    ort_values = OnnxRuntimeBackend(test_model, extra_outputs=wanted).infer(feeds, wanted) if wanted else {}
    ort_values.update({name: feeds[name] for name in feeds})
    captured = capture.modules[layer.module]
    module_inputs = captured.inputs
    if mapping.owner != layer.module:  # the Conv's inputs feed the folded pair
        module_inputs = torch_backend.capture(feeds, inputs_of=[mapping.owner]).modules[mapping.owner].inputs
    result = localize(
        test_model,
        index,
        mapping.owner,
        mapping.value,
        captured.output,
        {k: v for k, v in torch_values.items() if k != mapping.value},
        ort_values,
        module_inputs,
        policy.for_name(layer.module, captured.output.dtype, noise.get(layer.module)),
    )
    if result.cause == "inherited" and result.culprit_value and result.culprit_value not in torch_values:
        # The diverging input is no compared module's value (a tool fused its module away): find who owns it
        owned = _culprit_owner(index, result.culprit_value, torch_backend, feeds, test_model, policy)
        if owned is not None:
            return _owned(owned[0], owned[1], index, layer, sample, ort_values, torch_backend)
    output_max = layer.stats.max_abs if layer.stats else float("nan")
    input_max = result.input_max_abs
    source = layer.source
    note = result.note
    module = layer.module
    if mapping.owner != layer.module:
        # The exporter folded this BatchNorm into the Conv before it: one ONNX op holds both, and its weight is
        # the Conv's (scaled by the BatchNorm). A local error there is in that weight: name the Conv.
        note += f"; {mapping.owner} and {layer.module} are one ONNX {'/'.join(mapping.op_types)} (BatchNorm folded)"
        if result.cause == "local":
            module = mapping.owner
            owner_source = module_source(dict(torch_backend.module.named_modules())[module])
            source = mappings[module].source or owner_source or source
    found = differences(index, module_members(index).get(mapping.owner, []), torch_backend.module, module) \
        if result.cause == "local" else []
    if result.cause == "inherited" and result.culprit_value:
        note += f"; the diverging input is ONNX value {result.culprit_value!r}"
        if result.culprit_source:
            source = result.culprit_source
            note += f" computed at {result.culprit_source}"
    return FirstDivergence(
        module=module,
        cause=result.cause,
        source=source,
        op_types=layer.op_types,
        sample=sample,
        output_max_abs=output_max,
        input_max_abs=input_max,
        local_max_abs=result.local.max_abs if result.local else None,
        amplification=(output_max / input_max) if input_max else None,
        note=note,
        differences=tuple(found),
    )


def _frontier(index: GraphIndex, value: str, known: set[str], limit: int = 4000) -> tuple[list[str], list[int]]:
    """Walking back from ``value``: the known values (and graph inputs) that feed it, and the nodes in between."""
    nodes = index.model.graph.node
    frontier: list[str] = []
    needed: list[int] = []
    stack, seen = [value], set()
    while stack and len(needed) < limit:
        name = stack.pop()
        if not name or name in seen or name in index.initializers:
            continue
        seen.add(name)
        if name != value and (name in known or name in index.graph_inputs):
            frontier.append(name)
            continue
        producer = index.producer.get(name)
        if producer is None:
            continue
        if producer not in needed:
            needed.append(producer)
            stack.extend(nodes[producer].input)
    return frontier, needed


def localize_by_values(model: onnx.ModelProto, index: GraphIndex, value: str, target: np.ndarray,
                       torch_values: dict[str, np.ndarray], ort_values: dict[str, np.ndarray], tol: Tolerance) -> Localization:
    """Local vs inherited without scopes: cut the graph from ``value`` back to the nearest values torch also has
    (module outputs matched by name or by value, graph inputs), feed torch's, and compare with ``target``."""
    frontier, _ = _frontier(index, value, set(torch_values))
    feeds = {name: contiguous(torch_values[name]) for name in frontier if name in torch_values}
    if len(feeds) != len(frontier):
        return Localization("unknown", None, None, None, None, "cannot tell which torch values feed it")
    try:
        sub = extract_subgraph(model, index, feeds, value)
        result = OnnxRuntimeBackend(sub, name="onnxruntime-subgraph").infer(feeds)[value]
    except BackendError as exc:
        log.debug("value-cut subgraph failed: %s", exc)
        return Localization("unknown", None, None, None, None, f"its ONNX ops could not be run alone: {exc}")
    local = compare_arrays(result, target, tol)
    input_errors = {
        name: float(np.max(np.abs(ort_values[name].astype(np.float64) - feeds[name].astype(np.float64))))
        for name in feeds if name in ort_values and ort_values[name].shape == feeds[name].shape
        and np.issubdtype(feeds[name].dtype, np.floating)}
    input_max = max(input_errors.values(), default=0.0)
    if not local.passed:
        return Localization("local", local, input_max, None, None,
                            "its ONNX ops disagree with torch even when fed torch's own inputs")
    culprit = max(input_errors, key=input_errors.get) if input_errors and input_max > 0 else None
    source = index.sources[index.producer[culprit]] if culprit in index.producer else None
    return Localization("inherited", local, input_max, culprit, source,
                        "its ONNX ops match torch when fed torch's inputs: the error arrives with its inputs")


def _own_nodes(index: GraphIndex, value: str) -> list[int]:
    """The node computing ``value``, and the Conv/MatMul/Gemm before it when it only adds a bias initializer."""
    nodes = index.model.graph.node
    producer = index.producer.get(value)
    if producer is None:
        return []
    own = [producer]
    node = nodes[producer]
    if node.op_type == "Add":
        for name in node.input:
            before = index.producer.get(name)
            if before is not None and nodes[before].op_type in ("Conv", "MatMul", "Gemm", "ConvTranspose"):
                own.insert(0, before)
    return own


def _by_values(layer, mappings, index: GraphIndex, test_model, torch_backend: TorchBackend, feeds, sample: int,
               policy, noise: dict[str, float], group) -> FirstDivergence:
    """Localization for a module matched by value or heading a fused group: the graph is cut at the values torch
    also has (see :func:`localize_by_values`); a fused group's Conv is fed the conv's own torch input and compared
    with torch's conv -> batch_norm. An inherited error whose ONNX source belongs to no compared module is traced
    to the module that owns it (:func:`_culprit_owner`)."""
    from gapcheck.export_diff.align import group_reference  # the align pass imports this module

    mapping = mappings[layer.module]
    trusted = [p for p, m in mappings.items() if m.mapped and m.how not in ("unmatched", "group") and p != layer.module]
    capture = torch_backend.capture(feeds, modules=trusted + [layer.module], inputs_of=[layer.module])
    torch_values = {name: feeds[name] for name in feeds}
    for path in trusted:
        captured = capture.modules.get(path)
        if captured is not None and captured.output is not None:
            torch_values.setdefault(mappings[path].value, captured.output)
    own = _own_nodes(index, mapping.value)
    target = capture.modules[layer.module].output
    if group is not None:
        target = group_reference(target, dict(torch_backend.module.named_modules())[group.norm])
        conv_inputs = capture.modules[layer.module].inputs
        if own and len(conv_inputs) == 1:  # the fused Conv reads the conv's input: feed torch's own
            torch_values[index.model.graph.node[own[0]].input[0]] = conv_inputs[0]
    frontier, _ = _frontier(index, mapping.value, set(torch_values))
    wanted = [n for n in frontier if n not in feeds]
    ort_values = OnnxRuntimeBackend(test_model, extra_outputs=wanted).infer(feeds, wanted) if wanted else {}
    tol = policy.for_name(layer.module, target.dtype, noise.get(layer.module))
    result = localize_by_values(test_model, index, mapping.value, target, torch_values, ort_values, tol)
    if result.cause == "inherited" and result.culprit_value:
        owned = _culprit_owner(index, result.culprit_value, torch_backend, feeds, test_model, policy)
        if owned is not None:
            return _owned(owned[0], owned[1], index, layer, sample, ort_values, torch_backend)
    note = result.note + (f"; {group.describe()}" if group is not None else "")
    found = differences(index, own, torch_backend.module, layer.module,
                        group.members if group is not None else ()) if result.cause == "local" else []
    source = layer.source
    if result.cause == "inherited" and result.culprit_value:
        note += f"; the diverging input is ONNX value {result.culprit_value!r}"
        source = result.culprit_source or source
    output_max = layer.stats.max_abs if layer.stats else float("nan")
    return FirstDivergence(
        module=layer.module, cause=result.cause, source=source, op_types=layer.op_types, sample=sample,
        output_max_abs=output_max, input_max_abs=result.input_max_abs,
        local_max_abs=result.local.max_abs if result.local else None,
        amplification=(output_max / result.input_max_abs) if result.input_max_abs else None, note=note,
        group=group.members if group is not None else (), differences=tuple(found))


def _culprit_owner(index: GraphIndex, culprit: str, torch_backend: TorchBackend, feeds, test_model,
                   policy) -> tuple[str, str] | None:
    """The module an unnamed ONNX node implements, and the node's value: walking back from ``culprit`` along single
    dynamic inputs (at most 8 nodes), the first node whose input torch fed a module exactly, and whose output has
    that module's shape and is near its values but not within tolerance (the nearest such module, innermost on a
    tie). None when no node on the way fits."""
    nodes = index.model.graph.node
    chain: list[tuple[str, str]] = []  # (node input, node output), walking back
    value = culprit
    while len(chain) < 8 and value in index.producer:
        dynamic = [n for n in nodes[index.producer[value]].input if n and n not in index.initializers
                   and (index.producer.get(n) is None or nodes[index.producer[n]].op_type != "Constant")]
        if len(dynamic) != 1:
            break
        chain.append((dynamic[0], value))
        value = dynamic[0]
    if not chain:
        return None
    wanted = [n for n in dict.fromkeys(v for pair in chain for v in pair) if n not in feeds]
    ort = OnnxRuntimeBackend(test_model, extra_outputs=wanted).infer(feeds, wanted) if wanted else {}
    ort.update(feeds)
    paths = [p for p, m in torch_backend.module.named_modules() if p and hookable(m)]
    capture = torch_backend.capture(feeds, modules=paths, inputs_of=paths)
    for fed_name, produced_name in chain:
        fed, produced = ort[fed_name], ort[produced_name]
        fits = []
        for path, captured in capture.modules.items():
            if captured.output is None or len(captured.inputs) != 1 or captured.output.shape != produced.shape:
                continue
            given = captured.inputs[0]
            if given.shape != fed.shape or not compare_arrays(fed, given, policy.for_name(path, given.dtype)).passed:
                continue
            if compare_arrays(produced, captured.output, policy.for_name(path, captured.output.dtype)).passed:
                continue  # computes what torch computes: not where the error comes from
            off = _relative_error(produced, captured.output)
            if off <= OWNER_RELATIVE_ERROR:  # another module fed the same input (key vs query) is O(1) off
                fits.append((off, -path.count("."), path))
        if fits:
            return min(fits)[2], produced_name
    return None


#: How far an unnamed node's output may be from a module's output and still be that module computed otherwise (a
#: ReLU exported where torch has LeakyReLU(0.1) is ~0.1 off); a sibling fed the same input (query vs key) is O(1).
OWNER_RELATIVE_ERROR = 0.5


def _relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    worst = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64)))) if expected.size else 0.0
    return worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))


def _owned(owner: str, culprit: str, index: GraphIndex, layer, sample: int, ort_values, torch_backend) -> FirstDivergence:
    """The first divergence at the module that owns an unnamed node (see :func:`_culprit_owner`): local."""
    node = index.model.graph.node[index.producer[culprit]]
    torch_kind = type(dict(torch_backend.module.named_modules())[owner]).__name__
    note = (f"its ONNX op ({node.op_type}, value {culprit!r}) disagrees with torch although fed torch's input; the "
            f"tool that wrote the file fused it, so it has no compared value of its own (first seen at {layer.module})")
    return FirstDivergence(
        module=owner, cause="local", source=module_source(dict(torch_backend.module.named_modules())[owner]),
        op_types=(node.op_type,), sample=sample, output_max_abs=layer.stats.max_abs if layer.stats else float("nan"),
        input_max_abs=0.0, local_max_abs=None, amplification=None, note=note,
        differences=(f"the ONNX graph computes {node.op_type} where torch's {owner} is {torch_kind}",))
