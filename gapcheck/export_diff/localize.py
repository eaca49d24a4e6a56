"""Local vs inherited error: re-run one module's ONNX subgraph fed with torch's own values.

If the module's ONNX ops, fed exactly what torch fed the module, still disagree
with torch's output, the module *introduces* the error (local). If they agree, the
error arrived with its inputs (inherited) and the module only passed it on.
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import onnx

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import CaptureResult, TorchBackend, hookable
from gapcheck.compare import ErrorStats, Tolerance, TolerancePolicy, compare_arrays
from gapcheck.errors import BackendError, InputError
from gapcheck.export_diff.blame import conv_by_weight, differences, fused_linear_differences
from gapcheck.export_diff.calls import Call, call_values, capture_calls, every_call
from gapcheck.export_diff.nchwc import DOMAIN as NCHWC_DOMAIN
from gapcheck.export_diff.nchwc import Layout, blocked_values
from gapcheck.export_diff.owner import Owner, find_owner, merged, region, region_values
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
        [_without_fed_outputs(nodes[i], inputs) for i in sorted(needed)],
        "gapcheck_module_subgraph",
        [onnx.helper.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
         for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=output)],
        [init for init in model.graph.initializer if init.name in used or init.name in seen],
    )
    sub = onnx.helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    sub.functions.extend(model.functions)
    return sub


def _without_fed_outputs(node: onnx.NodeProto, inputs: dict[str, np.ndarray]) -> onnx.NodeProto:
    """``node`` with its outputs that the cut feeds renamed apart: a node needed for one output whose other output
    is fed (ONNX Runtime's EmbedLayerNormalization: the embeddings fed, its mask index needed) would define a graph
    input's name twice."""
    if not any(out in inputs for out in node.output):
        return node
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.output[:] = [f"{out}__fed_by_gapcheck" if out in inputs else out for out in node.output]
    return copy


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
        feeds[name] = contiguous(as_computed(value, ort_values.get(name)))
    result = _run_cut(model, index, feeds, output_value)
    if isinstance(result, str):
        return Localization("unknown", None, None, None, None, f"the module's subgraph could not be run alone: {result}")
    local = compare_arrays(result.astype(np.float32) if result.dtype == np.float16 else result, torch_output, tol)
    return _verdict(local, index, feeds, ort_values)


def _run_cut(model: onnx.ModelProto, index: GraphIndex, feeds: dict[str, np.ndarray], value: str) -> np.ndarray | str:
    """``value`` computed by the subgraph between ``feeds`` and it, alone in ONNX Runtime (why not, when it fails)."""
    try:
        sub = extract_subgraph(model, index, feeds, value)
        return OnnxRuntimeBackend(sub, name="onnxruntime-subgraph").infer(feeds)[value]
    except (BackendError, InputError) as exc:  # a cut ONNX Runtime refuses to load is not the user's input
        log.debug("cut subgraph failed: %s", exc)
        return str(exc)


def _verdict(local: ErrorStats, index: GraphIndex, feeds: dict[str, np.ndarray],
             ort_values: dict[str, np.ndarray]) -> Localization:
    """Local when the cut subgraph, fed torch's values, still disagrees; else inherited from the input ONNX Runtime
    gets most wrong."""
    input_errors = _input_errors(feeds, ort_values)
    input_max = max(input_errors.values(), default=0.0)
    if not local.passed:
        return Localization("local", local, input_max, None, None,
                            "its ONNX ops disagree with torch even when fed torch's own inputs")
    culprit = max(input_errors, key=input_errors.get) if input_errors and input_max > 0 else None
    source = index.sources[index.producer[culprit]] if culprit in index.producer else None
    return Localization("inherited", local, input_max, culprit, source,
                        "its ONNX ops match torch when fed torch's inputs: the error arrives with its inputs")


def _input_errors(feeds: dict[str, np.ndarray], ort_values: dict[str, np.ndarray]) -> dict[str, float]:
    """max |ONNX Runtime - torch| of every float value fed to a cut subgraph, where ONNX Runtime computed it too.
    A value fed in torch's shape where the graph holds the same elements flattened (a Linear's Gemm: [196, 192] for
    torch's [4, 49, 192], Swin's windows) is compared flattened too: left out, the input that carries the error
    (Swin's attn.proj, off after a changed norm1) was never the culprit, and a correct one was blamed instead."""
    errors = {}
    for name, fed in feeds.items():
        computed = ort_values.get(name)
        if computed is None or computed.size != fed.size or not np.issubdtype(fed.dtype, np.floating):
            continue
        diff = computed.astype(np.float64).reshape(fed.shape) - fed.astype(np.float64)
        errors[name] = float(np.max(np.abs(diff))) if diff.size else 0.0
    return errors


def module_source(module) -> str | None:
    """file:line of the module class's forward, for exporters that record no stack traces."""

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
    (:class:`~gapcheck.export_diff.align.FusedGroup`). A module matched by name whose ONNX inputs torch has no value
    for (a reshape before a Gemm, an unnamed LayerNorm before it) is cut by values instead."""
    failing = [layer for layer in layers if layer.status == FAIL]
    if not failing:
        return None
    layer = failing[0]
    mapping = mappings[layer.module]
    sample = layer.worst_sample or 0
    run = _Run(index, test_model, torch_backend, samples[sample], sample, policy, noise)
    earlier = _earliest_call(run, failing, mappings)
    if earlier is not None:
        return earlier
    group = (groups or {}).get(layer.module)
    if mapping.how in ("group", "value") or not module_members(index).get(mapping.owner):
        return _by_values(layer, mappings, run, group)
    found = _by_names(layer, mappings, run)
    if found.cause == "unknown":
        by_values = _by_values(layer, mappings, run, group)
        return by_values if by_values.cause != "unknown" else found
    return found


@dataclass(frozen=True)
class _Run:
    """What every localization step of one first divergence needs: the graph, both models, the sample."""

    index: GraphIndex
    test_model: onnx.ModelProto
    torch_backend: TorchBackend
    feeds: dict[str, np.ndarray]
    sample: int
    policy: TolerancePolicy
    noise: dict[str, float]

    def ort(self, wanted: Sequence[str]) -> dict[str, np.ndarray]:
        """ONNX Runtime's values of ``wanted`` on this sample (one more run), graph inputs included."""
        wanted = [n for n in dict.fromkeys(wanted) if n not in self.feeds]
        values = OnnxRuntimeBackend(self.test_model, extra_outputs=wanted).infer(self.feeds, wanted) if wanted else {}
        values.update(self.feeds)
        return values

    def submodule(self, path: str):
        return dict(self.torch_backend.module.named_modules())[path]

    @cached_property
    def layout(self) -> Layout:
        """ONNX Runtime's blocked NCHWc values of this graph (one more run only where the graph has NCHWc ops)."""
        return Layout.of(self.test_model, self.index, self.feeds)


def _by_names(layer, mappings, run: _Run) -> FirstDivergence:
    """Localization of a module matched by its scope: its nodes fed torch's values for what crosses into them."""
    index, feeds = run.index, run.feeds
    mapping = mappings[layer.module]
    mapped_paths = [p for p, m in mappings.items() if m.mapped]
    capture = run.torch_backend.capture(feeds, modules=mapped_paths, inputs_of=[layer.module])
    torch_values = dict(feeds)
    for path in mapped_paths:
        captured = capture.modules.get(path)
        if captured is not None and captured.output is not None:
            torch_values[mappings[path].value] = captured.output
    # A folded BatchNorm's value is computed by its Conv's nodes: the Conv's scope is the boundary.
    _, external = module_boundary(index, mapping.owner)
    ort_values = run.ort(external + [mapping.value])
    captured = capture.modules[layer.module]
    module_inputs = captured.inputs
    if mapping.owner != layer.module:  # the Conv's inputs feed the folded pair
        module_inputs = run.torch_backend.capture(feeds, inputs_of=[mapping.owner]).modules[mapping.owner].inputs
    result = localize(run.test_model, index, mapping.owner, mapping.value, captured.output,
                      {k: v for k, v in torch_values.items() if k != mapping.value}, ort_values, module_inputs,
                      run.policy.for_name(layer.module, captured.output.dtype, run.noise.get(layer.module)))
    if result.cause == "inherited" and result.culprit_value and result.culprit_value not in torch_values:
        # The diverging input is no compared module's value (a tool fused its module away): find who owns it
        owned = _culprit_owner(run, result.culprit_value, layer)
        if owned is not None:
            return owned
    module, source, note = layer.module, layer.source, result.note
    if mapping.owner != layer.module:
        # The exporter folded this BatchNorm into the Conv before it: one ONNX op holds both, and its weight is
        # the Conv's (scaled by the BatchNorm). A local error there is in that weight: name the Conv.
        note += f"; {mapping.owner} and {layer.module} are one ONNX {'/'.join(mapping.op_types)} (BatchNorm folded)"
        if result.cause == "local":
            module = mapping.owner
            source = mappings[module].source or module_source(run.submodule(module)) or source
    found = differences(index, module_members(index).get(mapping.owner, []), run.torch_backend.module, module) \
        if result.cause == "local" else []
    if result.cause == "local" and not found:  # a Conv that applies its BatchNorm and activation (FusedConv)
        fused = _fused_conv(run, mapping.value, layer.module, None, named_conv=True)
        named = fused_conv_divergence(layer, result, run, fused, None) if fused is not None else None
        if named is not None and named.differences:
            return named
    if result.cause == "local" and not found and mapping.owner == layer.module:
        owner = _owner_inside(run, mapping.value, torch_values, layer.module, ort_values)
        if owner is not None:
            return _owned(owner, run, layer)
    return _divergence(layer, module, result, source, note, run.sample, found)


def _divergence(layer, module: str, result: Localization, source: str | None, note: str, sample: int,
                found: Sequence[str], group=None) -> FirstDivergence:
    if result.cause == "inherited" and result.culprit_value:
        note += f"; the diverging input is ONNX value {result.culprit_value!r}"
        if result.culprit_source:
            source = result.culprit_source
            note += f" computed at {result.culprit_source}"
    output_max = layer.stats.max_abs if layer.stats else float("nan")
    return FirstDivergence(
        module=module, cause=result.cause, source=source, op_types=layer.op_types, sample=sample,
        output_max_abs=output_max, input_max_abs=result.input_max_abs,
        local_max_abs=result.local.max_abs if result.local else None,
        amplification=(output_max / result.input_max_abs) if result.input_max_abs else None, note=note,
        group=group.members if group is not None else (), differences=tuple(found))


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
                       torch_values: dict[str, np.ndarray], ort_values: dict[str, np.ndarray], tol: Tolerance,
                       layout: Layout | None = None) -> Localization:
    """Local vs inherited without scopes: cut the graph from ``value`` back to the nearest values torch also has
    (module outputs matched by name or by value, graph inputs), feed torch's, and compare with ``target``.
    ``torch_values`` are in the graph's layout; ``layout`` reads a blocked NCHWc result back as NCHW."""
    frontier, _ = _frontier(index, value, set(torch_values))
    feeds = {name: contiguous(as_computed(torch_values[name], ort_values.get(name)))
             for name in frontier if name in torch_values}
    if len(feeds) != len(frontier):
        return Localization("unknown", None, None, None, None, "cannot tell which torch values feed it")
    result = _run_cut(model, index, feeds, value)
    if isinstance(result, str):
        return Localization("unknown", None, None, None, None, f"its ONNX ops could not be run alone: {result}")
    if layout is not None:
        result = layout.plain(value, result, target.shape)
    if result.shape != target.shape and result.size == target.size:
        result = result.reshape(target.shape)  # a Gemm's 2-D value of a Linear applied to [batch, tokens, features]
    return _verdict(compare_arrays(result, target, tol), index, feeds, ort_values)


def _fitting_frontier(run: _Run, value: str, torch_values: dict[str, np.ndarray]
                      ) -> tuple[list[str], dict[str, np.ndarray]]:
    """The values torch has that feed ``value`` (:func:`_frontier`) and ONNX Runtime's values of them, without a
    torch value of another size than the ONNX value it is mapped to (dropped from ``torch_values``, the walk goes
    further back): such a mapping is not that value (timm Swin's shifted block, attributed by its attention mask's
    initializer to the mask's Add, [1, 4, 6, 49, 49] for torch's [1, 14, 14, 192]; fed, it refused the cut). NCHWc
    blocked values are another size by layout and are re-blocked by the caller."""
    blocked = blocked_values(run.index)
    for _ in range(4):
        frontier, _ = _frontier(run.index, value, set(torch_values))
        ort_values = run.ort(frontier)
        misfit = [n for n in frontier if n in torch_values and n in ort_values and n not in blocked
                  and n not in run.feeds and torch_values[n].size != ort_values[n].size]
        if not misfit:
            break
        for name in misfit:
            del torch_values[name]
    return frontier, ort_values


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


def _by_values(layer, mappings, run: _Run, group, call: Call | None = None,
               call_values_: dict[str, np.ndarray] | None = None) -> FirstDivergence:
    """Localization for a module matched by value or heading a fused group: the graph is cut at the values torch
    also has (see :func:`localize_by_values`); a fused group's Conv is fed the conv's own torch input and compared
    with torch's conv -> batch_norm. An inherited error whose ONNX source belongs to no compared module, or a local
    one that no parameter or attribute explains, is traced to the module that owns it (:mod:`.owner`). ``call``:
    one call of a module called several times (its output is the target), ``call_values_`` torch's values of the
    calls that agree, by ONNX value."""
    from gapcheck.export_diff.align import group_reference  # the align pass imports this module

    index = run.index
    mapping = mappings[layer.module]
    trusted = [p for p, m in mappings.items() if m.mapped and m.how not in ("unmatched", "group") and p != layer.module]
    capture = run.torch_backend.capture(run.feeds, modules=trusted + [layer.module], inputs_of=[layer.module])
    torch_values = dict(run.feeds)
    for path in trusted:
        captured = capture.modules.get(path)
        if captured is not None and captured.output is not None:
            torch_values.setdefault(mappings[path].value, captured.output)
    for name, array in (call_values_ or {}).items():
        torch_values.setdefault(name, array)
    own = _own_nodes(index, mapping.value)
    target = capture.modules[layer.module].output if call is None else call.output
    if group is not None:
        target = group_reference(target, run.submodule(group.norm))
        conv_inputs = capture.modules[layer.module].inputs
        if own and len(conv_inputs) == 1:  # the fused Conv reads the conv's input: feed torch's own
            torch_values[index.model.graph.node[own[0]].input[0]] = conv_inputs[0]
    frontier, ort_values = _fitting_frontier(run, mapping.value, torch_values)
    layout = run.layout if any(n in run.layout.blocked for n in [*frontier, mapping.value]) else None
    if layout is not None:  # torch's NCHW values fed where the graph holds them blocked
        torch_values.update({n: layout.to_graph(n, torch_values[n], ort_values.get(n)) for n in frontier
                             if n in torch_values})
    tol = run.policy.for_name(layer.module, target.dtype, run.noise.get(layer.module))
    result = localize_by_values(run.test_model, index, mapping.value, target, torch_values, ort_values, tol, layout)
    if result.cause == "inherited" and result.culprit_value:
        owned = _culprit_owner(run, result.culprit_value, layer)
        if owned is not None:
            return owned
    if result.cause == "local" and group is None:
        fused = _fused_conv(run, mapping.value, layer.module, layout)
        named = fused_conv_divergence(layer, result, run, fused, layout) if fused is not None else None
        if named is not None and named.differences:  # else the owner search below decides
            return named
    found = differences(index, own, run.torch_backend.module, layer.module, group.members if group is not None
                        else (), run.layout if blocked_values(index) else None) if result.cause == "local" else []
    if result.cause == "local" and not found and group is None:
        owner = _owner_inside(run, mapping.value, torch_values, layer.module, ort_values)
        if owner is not None:
            return _owned(owner, run, layer)
    note = result.note + (f"; {group.describe()}" if group is not None else "")
    return _divergence(layer, layer.module, result, layer.source, note, run.sample, found, group)


def _all_modules(run: _Run) -> CaptureResult:
    """torch's input and output of every hookable module on the sample, every call of a module called several times
    (only on a run that already diverges)."""
    return every_call(run.torch_backend, run.feeds)


def _culprit_owner(run: _Run, culprit: str, layer) -> FirstDivergence | None:
    """The divergence at whoever owns ``culprit``, an input no compared module computes: a fused weight, else the
    first ONNX value off from torch (:mod:`.owner`); None when neither is found."""
    fused = _fused_weights(run, culprit, layer)
    if fused is not None:
        return fused
    owner = _trace_owner(run, culprit)
    return None if owner is None else _owned(owner, run, layer)


def _trace_owner(run: _Run, culprit: str) -> Owner | None:
    """The module where the error of ``culprit`` (a diverging ONNX value no compared module owns) starts."""
    nodes = region(run.index, culprit)
    try:
        values = run.ort(region_values(run.index, nodes))
    except BackendError as exc:  # the divergence stays where it was seen
        log.debug("owner search run failed: %s", exc)
        return None
    return find_owner(run.index, nodes, values, _all_modules(run), run.policy, run.noise, set(run.feeds))


def _owner_inside(run: _Run, value: str, torch_values: dict[str, np.ndarray], module: str,
                  ort_values: dict[str, np.ndarray]) -> Owner | None:
    """In a subgraph that diverges locally at ``module`` without a parameter or attribute to show for it, the
    module where the error starts when the subgraph is fed torch's values; None when that is ``module`` itself.
    ``ort_values``: ONNX Runtime's values already fetched on this sample (the ones the cut feeds give their types)."""
    frontier, needed = _frontier(run.index, value, set(torch_values))
    if any(name not in torch_values for name in frontier):
        return None
    missing = [name for name in frontier if name not in ort_values]
    try:
        computed = {**ort_values, **run.ort(missing)} if missing else ort_values
    except BackendError as exc:  # the divergence stays where it was seen
        log.debug("owner search run failed: %s", exc)
        return None
    feeds = {name: contiguous(as_computed(torch_values[name], computed.get(name))) for name in frontier}
    wanted = [n for n in region_values(run.index, needed) if n not in feeds]
    try:
        sub = extract_subgraph(run.test_model, run.index, feeds, value)
        values = OnnxRuntimeBackend(sub, extra_outputs=wanted, name="onnxruntime-subgraph").infer(feeds, wanted)
    except (BackendError, InputError) as exc:  # a cut ONNX Runtime refuses: the divergence stays where it was seen
        log.debug("owner search subgraph failed: %s", exc)
        return None
    values.update(feeds)
    owner = find_owner(run.index, needed, values, _all_modules(run), run.policy, run.noise, set(feeds))
    return owner if owner is not None and owner.module != module else None


def as_computed(value: np.ndarray, computed: np.ndarray | None) -> np.ndarray:
    """torch's ``value``, fed into a cut of the graph, in the dtype ONNX Runtime computed that value in when it ran
    the whole graph (``computed``; FP32 -> FP16 in an FP16 file's body); as it is without one, or across kinds.
    Its leading axes merged where the graph holds it so (:func:`~gapcheck.export_diff.owner.merged`).

    The one cast rule of every localization path (by names, by values, the owner search inside a subgraph). The
    cut's consumers of a fed value are bound to the type its producer has in the whole graph, and ONNX Runtime's
    value is that type by construction, and every path has it for every value it feeds (it measures the inputs'
    errors with it). The types the graph declares (value_info) were the by-values rule, and are no rule: value_info
    is optional for intermediates and tools drop it; without it torch's FP32 values went into an FP16 cut as FP32,
    ONNX Runtime refused the cut ('bound to different types'), and an eps planted in an FP16 BERT's LayerNorm was
    left undetermined, one in an FP16 onnxslim block blamed on the next Linear. Where a declaration exists, ONNX
    Runtime refuses to load a graph whose computed type differs from it: the two rules never disagree otherwise."""
    if computed is None:
        return value
    if computed.shape != value.shape and value.ndim > 2 and computed.shape == merged(value).shape:
        # torch's [windows, tokens, C] where the graph holds the Gemm's [windows x tokens, C]: the same elements; fed
        # in torch's shape, a Reshape whose target the graph computes from it refused the cut (Swin's attn.qkv)
        value = merged(value)
    if computed.dtype == value.dtype or computed.dtype.kind != value.dtype.kind:
        return value  # a float torch value where the graph has indices is no cast: the cut fails and says so
    return value.astype(computed.dtype, copy=False)


def _owned(owner: Owner, run: _Run, layer) -> FirstDivergence:
    """The first divergence at the module that owns the node where the error starts (see :mod:`.owner`): local."""
    module = run.submodule(owner.module)
    note = (f"its ONNX op ({owner.op_type}, value {owner.value!r}) disagrees with torch although fed torch's input "
            f"(max rel {owner.relative_error:.2g}); the tool that wrote the file fused it, so it has no compared value "
            f"of its own (first seen at {layer.module})")
    found = differences(run.index, list(owner.nodes), run.torch_backend.module, owner.module)
    if not found:
        found = [f"the ONNX graph computes {owner.op_type} where torch's {owner.module} is {type(module).__name__}"]
    return FirstDivergence(
        module=owner.module, cause="local", source=module_source(module), op_types=(owner.op_type,),
        sample=run.sample, output_max_abs=layer.stats.max_abs if layer.stats else float("nan"), input_max_abs=0.0,
        local_max_abs=None, amplification=None, note=note, differences=tuple(found))


#: Ops between a Conv and a module's value that the Conv's own output passes unchanged in meaning: ONNX Runtime's
#: ReorderOutput (NCHWc -> NCHW) and the activations a fused Conv may leave after it
_AFTER_CONV = ("ReorderOutput", "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "LeakyRelu", "Mul",
               "QuickGelu")


def _conv_nodes(index: GraphIndex, value: str) -> list[int]:
    """The Conv computing ``value`` (through a ReorderOutput, a bias Add, an activation), and the nodes after it."""
    nodes = index.model.graph.node
    chain: list[int] = []
    name = value
    while (producer := index.producer.get(name)) is not None and len(chain) < 4:
        node = nodes[producer]
        chain.insert(0, producer)
        if node.op_type in ("Conv", "FusedConv"):
            return chain
        if node.op_type not in (*_AFTER_CONV, "Add"):
            return []
        inputs = [n for n in node.input if n and n not in index.initializers
                  and (index.producer.get(n) is None or nodes[index.producer[n]].op_type != "Constant")]
        if node.op_type == "Mul" and len(inputs) == 2 and inputs[0] != inputs[1] and value != name:
            return []
        if node.op_type == "Add" and len(inputs) != 1:  # a residual sum, not a bias: the error may come either way
            return []
        name = inputs[0] if inputs else ""
    return []


@dataclass(frozen=True)
class _FusedConv:
    conv: str
    nodes: tuple[int, ...]
    members: tuple[str, ...]  # conv, its BatchNorm, ..., the module whose value the Conv computes


def _fused_conv(run: _Run, value: str, module: str, layout: Layout | None, named_conv: bool = False
                ) -> _FusedConv | None:
    """When a Conv node computes ``module``'s value (ONNX Runtime's NCHWc Conv with its BatchNorm and activation
    folded in, a Conv that onnxslim fused with the BatchNorm after it) and ``module`` is not a conv itself: the
    torch conv whose weights it holds (:func:`~gapcheck.export_diff.blame.conv_by_weight`), heading the group.
    ``named_conv``: ``module`` may be the conv itself, named at a Conv that also applies what follows it."""
    from torch.nn.modules.conv import _ConvNd

    if isinstance(run.submodule(module), _ConvNd) and not named_conv:
        return None
    chain = _conv_nodes(run.index, value)
    if not chain or named_conv and len(chain) == 1 and not any(
            a.name == "activation" for a in run.index.model.graph.node[chain[0]].attribute):
        return None
    node = run.index.model.graph.node[chain[0]]
    found = conv_by_weight(run.index, node, run.torch_backend.module, layout or run.layout)
    if found is None:
        return None
    conv, norm = found
    paths = list(dict(run.torch_backend.module.named_modules()))
    children = [p for p in paths if norm and p.startswith(norm + ".")]
    nodes = run.index.model.graph.node
    applied = any(a.name == "activation" for i in chain for a in nodes[i].attribute) or any(
        nodes[i].op_type not in ("Conv", "FusedConv", "ReorderOutput", "Add") for i in chain)
    after = _next_activation(run, norm or conv) if applied and not children else None
    members = tuple(dict.fromkeys([conv, *([norm] if norm else []), *children, *([after] if after else []), module]))
    return _FusedConv(conv, tuple(chain), members)


def _next_activation(run: _Run, path: str) -> str | None:
    """The first activation module registered after ``path`` in the same parent (a ResNet block's act1 after bn1):
    the activation a Conv fused with ``path`` applies, when the BatchNorm does not hold it."""
    from gapcheck.export_diff.blame import ACTIVATION_CLASSES

    parent, _, name = path.rpartition(".")
    holder = run.submodule(parent) if parent else run.torch_backend.module
    names = list(dict(holder.named_children()))
    if name not in names:
        return None
    for sibling in names[names.index(name) + 1:]:
        if type(getattr(holder, sibling)).__name__ in ACTIVATION_CLASSES:
            return f"{parent}.{sibling}" if parent else sibling
    return None


def fused_conv_divergence(layer, result: Localization, run: _Run, fused: _FusedConv, layout: Layout | None
                          ) -> FirstDivergence:
    """A local divergence in the value a fused Conv computes, blamed on the conv (or on the activation, when what
    differs is the activation the Conv applies)."""
    module = run.torch_backend.module
    # the activation the Conv applies may be a child of the module whose value it computes (a residual block's act2,
    # applied after the sum that ONNX Runtime also folds into the Conv)
    depth = layer.module.count(".") + 1
    children = [p for p, _ in module.named_modules() if p.startswith(layer.module + ".") and p.count(".") == depth]
    found = differences(run.index, list(fused.nodes), module, fused.conv, (*fused.members, *children),
                        layout or run.layout)
    blocked = run.index.model.graph.node[fused.nodes[0]].domain == NCHWC_DOMAIN
    kind = "ONNX Runtime's NCHWc Conv" if blocked else "one Conv"
    note = (f"{result.note}; {' + '.join(fused.members)} are {kind} in this file (the conv named by its weights), "
            "so the conv heads the fused group")
    named = fused.conv
    activation = [d for d in found if d.startswith("the ONNX graph computes ")]
    if activation and len(activation) == len(found):  # the weights agree: the activation is what differs
        named = next((p for p in (*fused.members, *children) if f"torch's {p} is" in activation[0]), fused.conv)
    source = module_source(run.submodule(named)) or layer.source
    return _divergence(layer, named, result, source, note, run.sample, found,
                       _Members(fused.members) if named == fused.conv else None)


@dataclass(frozen=True)
class _Members:
    members: tuple[str, ...]


def _fused_weights(run: _Run, culprit: str, layer) -> FirstDivergence | None:
    """An inherited error whose diverging input a fused op computes from several Linears' parameters in one
    initializer (ONNX Runtime's Attention: query, key and value weights side by side), where a slice differs from
    the checkpoint: the Linear whose parameter differs, local."""
    nodes = run.index.model.graph.node
    for i in region(run.index, culprit, limit=8):
        found = fused_linear_differences(run.index, nodes[i], run.torch_backend.module)
        if not found:
            continue
        path = found[0][0]
        note = (f"the fused {nodes[i].op_type} ({nodes[i].name or 'unnamed'}) holds several Linears' parameters in "
                f"one initializer; its slice for {path} differs from the checkpoint (first seen at {layer.module}, "
                "whose own ops agree when fed torch's inputs)")
        return FirstDivergence(
            module=path, cause="local", source=module_source(run.submodule(path)), op_types=(nodes[i].op_type,),
            sample=run.sample, output_max_abs=layer.stats.max_abs if layer.stats else float("nan"),
            input_max_abs=None, local_max_abs=None, amplification=None, note=note,
            differences=tuple(sentence for _, sentence in found))
    return None


def _earliest_call(run: _Run, failing, mappings) -> FirstDivergence | None:
    """When failing modules are called several times (a shared layer), the earliest failing call in torch's order,
    localized with that call's own ONNX value (:mod:`.calls`); None when that is the first failing layer's last
    call, which the comparison already localizes."""
    calls = capture_calls(run.torch_backend, run.feeds, [layer.module for layer in failing])
    shared = {p: c for p, c in calls.items() if len(c) > 1 and mappings[p].mapped}
    values = {p: call_values(run.index, mappings[p], len(c)) for p, c in shared.items()}
    values = {p: v for p, v in values.items() if v}
    if not values:
        return None
    try:
        ort = run.ort([v for vs in values.values() for v in vs])
    except BackendError as exc:
        log.debug("per-call values could not be computed: %s", exc)
        return None
    entries = []  # (order, module, call, value, stats): every call of the shared ones, the last of the others
    for layer in failing:
        if layer.module not in values:
            if calls[layer.module]:
                entries.append((calls[layer.module][-1].order, layer, calls[layer.module][-1], None, None))
            continue
        for call, value in zip(calls[layer.module], values[layer.module], strict=True):
            stats = _compare_call(run, layer.module, call, ort.get(value))
            if stats is not None:
                entries.append((call.order, layer, call, value, stats))
    agreeing = {value: call.output for _, _, call, value, stats in entries if stats is not None and stats.passed}
    diverging = [e for e in entries if e[4] is None or not e[4].passed]
    if not diverging:
        return None
    _, layer, call, value, stats = min(diverging, key=lambda e: e[0])
    count = len(calls[layer.module])
    if value is None or (layer is failing[0] and call.index == count - 1):
        return None
    mapping = dataclasses.replace(mappings[layer.module], value=value, how="value")
    found = _by_values(dataclasses.replace(layer, stats=stats), {**mappings, layer.module: mapping}, run, None,
                       call, agreeing)
    return dataclasses.replace(found, note=found.note + (
        f"; {layer.module} is called {count} times (a shared module): call {call.index + 1} is the first that "
        f"diverges (ONNX value {value!r}), each call compared with its own ONNX value"))


def _compare_call(run: _Run, path: str, call: Call, actual: np.ndarray | None) -> ErrorStats | None:
    if call.output is None or actual is None:
        return None
    if actual.shape != call.output.shape and actual.size == call.output.size:
        actual = actual.reshape(call.output.shape)  # a Gemm over the flattened batch
    if actual.shape != call.output.shape:
        return None
    return compare_arrays(actual, call.output, run.policy.for_name(path, call.output.dtype, run.noise.get(path)))
