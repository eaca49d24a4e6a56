"""Alignment that survives optimization: confirm a module's ONNX value by its values where names are not enough.

Names map a module to an ONNX value (:mod:`gapcheck.model.mapping`). On a graph another tool rewrote
(onnxslim, onnxsim, ONNX Runtime's transformer optimizer, a Conv+BatchNorm fusion) names can point at the
wrong tensor: a weight name now belongs to a fused Conv that computes conv + BatchNorm, a module's real
output comes from an unnamed fused node (SkipLayerNormalization, Attention, BiasGelu), scopes are gone.

So a module that *fails* on the first sample under its name mapping is a suspect, and is re-checked by value
(the plain run, where every module passes, does none of this):

1. **Fused groups.** A Conv (or Linear) whose output feeds a BatchNorm is one group with it (and the BatchNorm's
   activation): its ONNX value is compared with torch's conv -> batch_norm, computed from torch's own conv output.
   The conv is the group's first member; it is named when the group diverges.
2. **Search by value.** Else the ONNX value whose values agree with the module's torch output under its
   noise-aware tolerance (one ONNX Runtime run on the first sample with every value marked) becomes its mapping;
   the other samples then check it.
3. **Not comparable here.** A module no ONNX value matches is compared through its neighbours, reported as info:
   when the model's outputs all agree, its error cannot be real (it reaches no output); when they do not, it
   stays a divergence only if its error does reach a compared value downstream.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import CaptureResult, TorchBackend, hookable
from gapcheck.compare import ErrorStats, Tolerance, TolerancePolicy, compare_arrays
from gapcheck.export_diff.calls import through_bias
from gapcheck.export_diff.nchwc import Layout, blocked_values, crop
from gapcheck.export_diff.owner import BIAS_INPUT, before_bias
from gapcheck.export_diff.passes import LayerAccumulator
from gapcheck.model.mapping import GraphIndex, ModuleMapping
from gapcheck.tensors import fingerprint

_LINEAR = (_ConvNd, nn.Linear)


@dataclass(frozen=True)
class FusedGroup:
    """Modules an ONNX tool fused into one op: the conv (first member), its BatchNorm, and the BatchNorm's own
    children (timm's BatchNormAct2d holds the activation)."""

    members: tuple[str, ...]
    kind: str  # "Conv+BatchNorm"

    @property
    def first(self) -> str:
        return self.members[0]

    @property
    def norm(self) -> str:
        return self.members[1]

    def describe(self) -> str:
        return f"fused group {' + '.join(self.members)} ({self.kind} folded into one ONNX op)"


@dataclass
class Realignment:
    """What the re-check by value changed: mappings, per-module comparisons, groups and notes."""

    mappings: dict[str, ModuleMapping] = field(default_factory=dict)
    accumulators: dict[str, LayerAccumulator] = field(default_factory=dict)
    groups: dict[str, FusedGroup] = field(default_factory=dict)  # by first member
    not_comparable: dict[str, str] = field(default_factory=dict)  # module -> why
    references: dict[str, str] = field(default_factory=dict)  # module -> what torch value it was compared with
    # suspects no value matched: whether the named value is still the closest tensor and near it (a real divergence)
    plausible: dict[str, bool] = field(default_factory=dict)
    # suspects named at the product before a fused op adds their bias: whether value + bias agrees with torch
    debiased: dict[str, bool] = field(default_factory=dict)
    layout: Layout = field(default_factory=Layout)  # ONNX Runtime's blocked NCHWc values, read back as NCHW

    @property
    def changed(self) -> bool:
        return bool(self.mappings or self.not_comparable)


#: ONNX Runtime's layout transformer (ORT_ENABLE_ALL, saved with ``optimized_model_filepath``) rewrites a CNN's Convs
#: into the com.microsoft.nchwc domain: their values hold a blocked NCHWc layout (channels in blocks of 8 or 16, by
#: the CPU's vector width), read back as NCHW by :class:`~gapcheck.export_diff.nchwc.Layout` before any comparison.
#: A value in that layout whose block size could not be read is never compared:
BLOCKED_NOTE = ("not comparable here: ONNX Runtime's layout optimization computes it in the blocked NCHWc layout "
                "({value!r}, a com.microsoft.nchwc node){why}; it is compared through the values after ReorderOutput")
_FUSED_ACT = ", fused with the activation after it, so no ONNX value holds the conv -> batch_norm alone"


def _float_values(model: onnx.ModelProto, layout: Layout = Layout()) -> list[str]:
    """Every value a node computes (Constant nodes aside, and blocked NCHWc values unless ``layout`` reads them
    back): the candidates a module's output may live in."""
    return [name for node in model.graph.node if node.op_type != "Constant" for name in node.output
            if name and (layout or name not in layout.blocked)]


def group_reference(conv_out: np.ndarray, bn: _BatchNorm) -> np.ndarray:
    """torch's conv -> batch_norm (eval) on torch's own conv output: what a folded Conv computes."""
    with torch.no_grad():
        out = torch.nn.functional.batch_norm(
            torch.from_numpy(np.ascontiguousarray(conv_out)), bn.running_mean, bn.running_var, bn.weight, bn.bias,
            False, 0.0, bn.eps)
    return out.numpy()


def find_groups(module: nn.Module, capture: CaptureResult) -> dict[str, FusedGroup]:
    """Conv/Linear -> BatchNorm pairs: a BatchNorm whose input is exactly a conv's output (torch, first sample)."""
    submodules = dict(module.named_modules())
    linear_outputs = [(c.order, p, c.output) for p, c in capture.modules.items()
                      if isinstance(submodules.get(p), _LINEAR) and c.output is not None]
    groups: dict[str, FusedGroup] = {}
    for path, captured in capture.modules.items():
        norm = submodules.get(path)
        if not isinstance(norm, _BatchNorm) or norm.training or not captured.inputs:  # train mode: batch statistics
            continue
        fed = captured.inputs[0]
        for _, conv, out in sorted(linear_outputs, key=lambda t: -t[0]):
            if out.shape == fed.shape and np.array_equal(out, fed):
                children = tuple(p for p in submodules if p.startswith(path + "."))
                groups[conv] = FusedGroup((conv, path) + children, "Conv+BatchNorm")
                break
    return groups


def _group_value(index: GraphIndex, group: FusedGroup) -> str | None:
    """The ONNX value a fused group's Conv computes: the node reading the conv's weight by name, else the Conv in
    the conv's or the BatchNorm's scope."""
    nodes = index.model.graph.node
    weight = f"{group.first}.weight"
    for i in sorted(index.consumers.get(weight, ())):
        if nodes[i].op_type in ("Conv", "Gemm", "MatMul", "ConvTranspose"):
            return through_bias(index, nodes[i].output[0])
    for path in (group.first, group.norm):
        for i, scopes in enumerate(index.scopes):
            if scopes and scopes[-1] == path and nodes[i].op_type in ("Conv", "ConvTranspose"):
                return through_bias(index, nodes[i].output[0])
    return None


def _applies_more(index: GraphIndex, value: str | None) -> bool:
    """Whether ``value`` comes from a Conv that applies more than conv -> batch_norm itself: an activation or a
    residual sum (ONNX Runtime's FusedConv and NCHWc Conv: ``activation``, a fourth input added to the result)."""
    producer = index.producer.get(value) if value else None
    if producer is None:
        return False
    node = index.model.graph.node[producer]
    return any(a.name == "activation" for a in node.attribute) or len([n for n in node.input if n]) > 3


#: A named value within this fraction of the module's largest value, and closer than any other tensor, is the
#: module's output computed differently (a real divergence: GELU tanh vs erf is 5e-4, a 1% weight change ~1e-2);
#: a wrong tensor (a MatMul before its fused bias and LayerNorm, a Conv before its fused BatchNorm) is off by O(1).
PLAUSIBLE_RELATIVE_ERROR = 0.05


def _relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    worst = float(np.nanmax(diff)) if diff.size else 0.0
    return worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))


@dataclass
class _Search:
    """One module's search among ONNX Runtime's values, fed one value at a time (the values are streamed, see
    :data:`VALUE_CHUNK_BYTES`): the passing value (the named one first, then the lowest error ratio, then the
    latest), and every value near enough to be the closest or its rival (a digest, never the array)."""

    target: np.ndarray
    tol: Tolerance
    named: str | None
    passing: tuple | None = None  # (not the named one, error ratio, -position, name, stats)
    named_stats: ErrorStats | None = None
    near: list[tuple[float, str, str, ErrorStats]] = field(default_factory=list)  # (rel. error, name, digest, stats)
    bias: np.ndarray | None = None  # the module's own bias, when a fused op adds it to the named value
    debiased_ok: bool | None = None  # whether the named value plus that bias agrees with the module's output

    def see(self, name: str, array: np.ndarray, position: int) -> None:
        if name == self.named:  # a group falls back to it even when it fails (with its shape, if that differs)
            self.named_stats = compare_arrays(array, self.target, self.tol)
            if self.bias is not None and array.shape[-1:] == self.bias.shape:
                self.debiased_ok = compare_arrays(array + self.bias, self.target, self.tol).passed
        if array.shape != self.target.shape or not np.issubdtype(array.dtype, np.floating):
            return
        stats = compare_arrays(array, self.target, self.tol) if self.named_stats is None or name != self.named \
            else self.named_stats
        if stats.passed:
            key = (name != self.named, stats.error_ratio, -position, name)
            if self.passing is None or key < self.passing[:4]:
                self.passing = (*key, stats)
        error = _relative_error(array, self.target)
        if error <= 10 * PLAUSIBLE_RELATIVE_ERROR:  # a rival is within 10x the closest, which is within PLAUSIBLE
            self.near.append((error, name, fingerprint(array), stats))

    def best(self) -> tuple[str, ErrorStats] | None:
        """The ONNX value agreeing with the target under its tolerance: the named one if it passes, else the closest."""
        return (self.passing[3], self.passing[4]) if self.passing else None

    def closest(self) -> tuple[str, ErrorStats] | None:
        """The tensor nearest torch's output when it is near (see PLAUSIBLE_RELATIVE_ERROR) and unambiguous: every
        other same-shape tensor is at least ten times farther (a residual stream and its block differ by little)."""
        ranked = sorted(self.near, key=lambda t: (t[0], t[1] != self.named, t[1]))  # a copy's tie: the named one
        if not ranked or ranked[0][0] > PLAUSIBLE_RELATIVE_ERROR:
            return None
        error, name, digest, stats = ranked[0]
        # a copy of the same tensor (a MatMul and its Add of a zero bias, an Identity) is no rival
        rivals = [e for e, _, other, _ in ranked[1:] if e < 10 * error and other != digest]
        return None if rivals else (name, stats)


#: ONNX Runtime's values are fetched in runs of at most about this many bytes (the graph runs once per run): the
#: search by value never holds every activation of a sample at once, only torch's outputs of the modules searched.
VALUE_CHUNK_BYTES = 256 << 20
_FIRST_RUN_VALUES = 8  # the first run measures how large the values are


def _stream(test_model: onnx.ModelProto, feeds: dict[str, np.ndarray], names: list[str],
            searches: Sequence[_Search], layout: Layout = Layout()) -> None:
    """Feed every value of ``names`` to every search, fetching them from ONNX Runtime a bounded chunk at a time
    (blocked NCHWc values read back as NCHW, cut to each search's channel count)."""
    session = OnnxRuntimeBackend(test_model, extra_outputs=names, name="onnxruntime-values")
    start, size = 0, _FIRST_RUN_VALUES
    while start < len(names):
        chunk = names[start:start + size]
        values = session.infer(feeds, chunk)
        for position, name in enumerate(chunk, start=start):
            array = layout.plain(name, values[name])
            for search in searches:
                fitted = crop(array, search.target.shape, layout.block) if name in layout.blocked else array
                search.see(name, fitted, position)
        held = sum(array.nbytes for array in values.values())
        del values
        start += len(chunk)
        size = max(1, int(VALUE_CHUNK_BYTES // max(held / len(chunk), 1)))


def _downstream(index: GraphIndex, value: str, agreed: frozenset[str] = frozenset()) -> set[str]:
    """Every value computed from ``value``, not past a value in ``agreed`` (one that matches torch: an error cannot
    have travelled through it)."""
    nodes = index.model.graph.node
    seen: set[str] = set()
    stack = [value]
    while stack:
        for i in index.consumers.get(stack.pop(), ()):
            for out in nodes[i].output:
                if out and out not in seen:
                    seen.add(out)
                    if out not in agreed:
                        stack.append(out)
    return seen


def realign(
    torch_backend: TorchBackend,
    test_model: onnx.ModelProto,
    index: GraphIndex,
    mappings: dict[str, ModuleMapping],
    accumulators: dict[str, LayerAccumulator],
    samples: Sequence[dict[str, np.ndarray]],
    policy: TolerancePolicy,
    noise: dict[str, float],
    failing_outputs: set[str],
) -> Realignment:
    """Re-check by value the modules that fail on the first sample under their name mapping (see module docstring)."""
    suspects = [p for p, acc in accumulators.items() if any(s == 0 and not st.passed for s, st in acc.stats)]
    blocked = blocked_values(index)  # NCHWc values padded to whole blocks: another shape than torch's, uncompared
    suspects += [p for p, acc in accumulators.items() if not acc.stats and mappings[p].value in blocked]
    if not suspects and not failing_outputs:
        return Realignment()
    module = torch_backend.module
    submodules = dict(module.named_modules())
    hooked = [p for p, m in submodules.items() if p and hookable(m)]
    norms = [p for p in hooked if isinstance(submodules[p], _BatchNorm)]
    # torch's outputs only of what is searched (suspects, modules without a value) and of the convs a group may start
    needed = [p for p in hooked if p in suspects or not mappings[p].mapped or isinstance(submodules[p], _LINEAR)]
    capture = torch_backend.capture(samples[0], modules=needed, inputs_of=norms)
    layout = Layout.of(test_model, index, samples[0])
    _add_noise(torch_backend, samples[0], capture, noise, needed)
    suspect_set = set(suspects)
    groups = {c: g for c, g in find_groups(module, capture).items() if suspect_set & set(g.members)}
    grouped = {m: g for g in groups.values() for m in g.members[:2]}
    if policy.precision != "fp32":  # FP16 budgets (1% of each tensor's range) are too wide to find a module's output
        # by value (a LayerNorm's input passes for its output): only a fused group's conv -> batch_norm is re-checked
        suspects = [s for s in suspects if s in grouped]
        suspect_set = set(suspects)
    searches = _searches(capture, groups, suspects, grouped, hooked, index, mappings, submodules, policy, noise,
                         layout)
    _name_by_outputs(searches, capture, index, suspect_set)
    _stream(test_model, samples[0], _float_values(test_model, layout), list(searches.values()), layout)
    out = Realignment(layout=layout)
    linears = frozenset(p for p, m in submodules.items() if isinstance(m, _LINEAR))
    for path, search in searches.items():
        if path in groups:
            _settle_group(path, groups[path], search, index, out, layout)
        elif path in suspect_set:
            _settle_suspect(path, search, index, mappings, out, linears)
        else:  # something diverges: a module the names gave no value is matched by value too, so the divergence is
            _settle_unnamed(path, search, index, out, linears)  # localized among them, not at the next named one
    _drop_taken(out, suspects, mappings, accumulators, index, failing_outputs)
    _mark_unreachable(out, suspects, grouped, mappings, accumulators, index, failing_outputs, linears)
    _relaid(out, searches, suspects, mappings, index)
    _check_other_samples(out, torch_backend, test_model, submodules, samples, policy, noise)
    return out


def _add_noise(torch_backend: TorchBackend, feeds: dict[str, np.ndarray], capture: CaptureResult,
               noise: dict[str, float], needed: list[str]) -> None:
    """The noise floor of the searched modules the run has none for (modules no name mapped: an Identity head, a
    Dropout), measured in place: without it their budget is the fixed 1e-4, and on a model whose activations reach
    1e4 (a reparameterized RepVGG) the graph output passes its noise-aware budget while the same tensor fails
    under an unmapped module's name, and every suspect upstream of it is reported as a divergence that reaches
    it. Only when the run measured noise already (one more float64 pass over the first sample)."""
    missing = [p for p in needed if p not in noise]
    if noise and missing:
        noise.update({p: n for p, n in torch_backend.noise_floor(feeds, capture, missing).items() if p not in noise})


def _searches(capture: CaptureResult, groups: dict[str, FusedGroup], suspects: list[str],
              grouped: dict[str, FusedGroup], hooked: list[str], index: GraphIndex, mappings: dict[str, ModuleMapping],
              submodules, policy: TolerancePolicy, noise: dict[str, float], layout: Layout) -> dict[str, _Search]:
    """What to look for: each fused group's conv -> batch_norm, each suspect's output (its named value preferred;
    a grouped one too when its name points at a blocked NCHWc value: ONNX Runtime's NCHWc Conv applies the
    activation, so the group's own value may not exist), each module without a value's output; in that order."""
    searches: dict[str, _Search] = {}
    for path, group in groups.items():
        captured = capture.modules.get(path)
        if captured is not None and captured.output is not None:
            target = group_reference(captured.output, submodules[group.norm])
            floor = max(noise.get(path, 0.0), noise.get(group.norm, 0.0)) or None
            searches[path] = _Search(target, policy.for_name(path, target.dtype, floor), _group_value(index, group))
    # FP16 budgets: not searched (see realign; a ReLU6 after a passing group fails with the group's very error too:
    # its range is clipped, and the budget scaled to it)
    unnamed = [p for p in hooked if not mappings[p].mapped and p not in grouped and p not in groups] \
        if policy.precision == "fp32" else []
    alone = [s for s in suspects if s not in groups and (s not in grouped or mappings[s].value in layout.blocked)]
    for path in [*alone, *unnamed]:
        captured = capture.modules.get(path)
        if captured is None or captured.output is None or not np.issubdtype(captured.output.dtype, np.floating):
            continue
        tol = policy.for_name(path, captured.output.dtype, noise.get(path))
        named = mappings[path].value if path in suspects else None
        bias = _own_bias(index, named) if isinstance(submodules[path], _LINEAR) else None
        searches[path] = _Search(captured.output, tol, named, bias=bias)
    return searches


def _name_by_outputs(searches: dict[str, _Search], capture: CaptureResult, index: GraphIndex,
                     suspects: set[str]) -> None:
    """A module without a name mapping whose torch output *is* one of the model's outputs (a BERT's last LayerNorm
    and the blocks that return its result) is named at that graph output: in a graph without scopes or weight
    names, where an epsilon makes its value too far from torch's to be the nearest, the module is still compared
    (and the divergence localized) instead of an output mismatch without a module."""
    outputs = {name: capture.outputs[name] for name in index.graph_outputs if name in capture.outputs}
    for path, search in searches.items():
        if search.named is not None or path in suspects:
            continue
        search.named = next((name for name, array in outputs.items() if array.shape == search.target.shape
                             and array.dtype == search.target.dtype and np.array_equal(array, search.target)), None)


def _own_bias(index: GraphIndex, value: str | None) -> np.ndarray | None:
    """The bias a fused op adds to ``value`` (the initializer at its bias input, whatever a tool renamed it to:
    onnxslim and the optimizer share one zero bias among many Linears), when one does (:func:`before_bias`)."""
    if value is None:
        return None
    nodes = index.model.graph.node
    for i in index.consumers.get(value, ()):
        position = BIAS_INPUT.get(nodes[i].op_type)
        if position is not None and len(nodes[i].input) > position and nodes[i].input[0] == value:
            name = nodes[i].input[position]
            for init in index.model.graph.initializer:
                if init.name == name:
                    return onnx.numpy_helper.to_array(init).astype(np.float32)
    return None


def _settle_group(path: str, group: FusedGroup, search: _Search, index: GraphIndex, out: Realignment,
                  layout: Layout) -> None:
    match = search.best()
    value, stats = match if match else (search.named, search.named_stats)
    if match is None and value in layout.blocked and (not layout or _applies_more(index, value)):
        why = _FUSED_ACT if layout else ", whose block size could not be read"  # (or the residual sum)
        for member in group.members[:2]:
            out.not_comparable[member] = BLOCKED_NOTE.format(value=value, why=why)
        return
    if match is None and _applies_more(index, value):
        for member in group.members[:2]:
            out.not_comparable[member] = (
                f"not comparable here: ONNX Runtime's FusedConv ({value!r}) applies the activation after it too, so "
                "no ONNX value holds the conv -> batch_norm alone; compared at the activation")
        return
    if value is None or stats is None:
        return
    out.groups[path] = group
    out.references[path] = f"conv -> batch_norm of {group.norm} (BatchNorm folded)"
    out.mappings[path] = _mapping(path, value, index, how="group", scope=None)
    out.accumulators[path] = LayerAccumulator(stats=[(0, stats)], note=group.describe())


def _settle_suspect(path: str, search: _Search, index: GraphIndex, mappings: dict[str, ModuleMapping],
                    out: Realignment, linears: frozenset[str]) -> None:
    named = search.named
    match, how = search.best(), "matched by value"
    if match is None:
        closest = search.closest()
        if search.debiased_ok is not None:  # the product before a fused op adds its bias: judged with the bias
            out.plausible[path] = not search.debiased_ok  # an error beyond the bias is its own (or inherited)
            out.debiased[path] = search.debiased_ok
            return
        if closest is None or closest[0] == named:
            out.plausible[path] = closest is not None and not _bias_added_later(index, named, linears)
            return
        # Its name points at another tensor; the one near its output is it, computed differently: a divergence
        match, how = closest, "closest by value"
    value, stats = match
    out.mappings[path] = _mapping(path, value, index, how="value", scope=mappings[path].scope)
    out.accumulators[path] = LayerAccumulator(stats=[(0, stats)],
                                              note=f"{how}: ONNX value {value!r} (its name pointed at {named!r})")


def _bias_added_later(index: GraphIndex, value: str | None, linears: frozenset[str]) -> bool:
    """Whether a fused op adds a Linear's own bias to ``value`` (ONNX Runtime's BiasGelu, SkipLayerNormalization:
    :func:`gapcheck.export_diff.owner.before_bias`), reading it by the Linear's name: ``value`` is the product
    before it, near the module's output by as much as the bias is small (MiniLM's real biases: 3% of the output),
    yet no divergence and not the output of the module (a Dropout) that follows. A Gemm reading ``value`` with its
    own bias is another Linear, not this."""
    if value is None or not before_bias(index, value):
        return False
    nodes = index.model.graph.node
    return any(name.endswith(".bias") and name[:-5] in linears
               for i in index.consumers.get(value, ()) for name in nodes[i].input if name != value)


def _settle_unnamed(path: str, search: _Search, index: GraphIndex, out: Realignment, linears: frozenset[str]) -> None:
    """A module without a name mapping: the ONNX value agreeing with its output, else the unambiguously nearest one
    (its output computed otherwise: a divergence); nothing when neither exists."""
    match, how = search.best(), "matched by value"
    if match is None:
        match, how = search.closest(), "nearest by value"
    if match is None and search.named is not None and search.named_stats is not None:
        match, how = (search.named, search.named_stats), "its output is the model's output"
    if match is None or (how == "nearest by value" and _bias_added_later(index, match[0], linears)):
        return
    value, stats = match
    out.mappings[path] = _mapping(path, value, index, how="value", scope=None)
    out.accumulators[path] = LayerAccumulator(stats=[(0, stats)], note=f"{how}: ONNX value {value!r} (no name mapped it)")


def _drop_taken(out: Realignment, suspects: list[str], mappings: dict[str, ModuleMapping],
                accumulators: dict[str, LayerAccumulator], index: GraphIndex, failing_outputs: set[str]) -> None:
    """A module matched only to its *nearest* value (not within tolerance) whose value agrees with torch for another
    module, or is a graph output that agrees, is not comparable here: that value is the other module's output, and
    this module's was fused away. ONNX Runtime fuses a BERT pooler's Linear and Tanh into one FusedGemm, whose
    output is tanh(x) ~ x for small x, 1-5% from the Linear's output: the Linear was reported as a divergence
    while every output agreed."""
    agreed = {o.name for o in index.model.graph.output} - set(failing_outputs)
    for path, mapping in {**mappings, **out.mappings}.items():
        acc = out.accumulators.get(path) or (accumulators.get(path) if path not in suspects else None)
        if mapping.value and acc is not None and acc.stats and all(st.passed for _, st in acc.stats):
            agreed.add(mapping.value)
    for path, acc in list(out.accumulators.items()):
        value = out.mappings[path].value
        if path in out.groups or not acc.stats or all(st.passed for _, st in acc.stats) or value not in agreed:
            continue
        del out.mappings[path], out.accumulators[path]
        out.not_comparable[path] = (
            f"not comparable here: its output has no ONNX value of its own (a tool fused it with what follows); the "
            f"nearest, {value!r}, agrees with torch as another tensor")


def _mapping(path: str, value: str, index: GraphIndex, *, how: str, scope: str | None) -> ModuleMapping:
    nodes = index.model.graph.node
    producer = index.producer.get(value)
    node = nodes[producer] if producer is not None else None
    return ModuleMapping(module=path, value=value, op_types=(node.op_type,) if node is not None else (),
                         node_names=(node.name,) if node is not None else (), source=None, scope=scope, how=how)


def _mark_unreachable(out: Realignment, suspects: list[str], grouped: dict[str, FusedGroup],
                      mappings: dict[str, ModuleMapping], accumulators: dict[str, LayerAccumulator],
                      index: GraphIndex, failing_outputs: set[str], linears: frozenset[str]) -> None:
    """Suspects no value confirmed: not comparable here unless their error reaches a value that disagrees (a graph
    output, or a module value that is no suspect itself)."""
    confirmed = {**mappings, **out.mappings}
    disagreeing = set(failing_outputs)
    agreeing: set[str] = set()
    for path, mapping in confirmed.items():
        acc = out.accumulators.get(path) or (accumulators[path] if path not in suspects else None)
        if mapping.value and acc is not None and acc.stats:
            (agreeing if all(st.passed for _, st in acc.stats) else disagreeing).add(mapping.value)
    # an error stops at a value that matches torch (a block's residual sum after a layer-scaled fc2 whose scale a
    # tool folded into its weight): a suspect only upstream of it reaches nothing, whatever fails later
    agreed = frozenset(agreeing - disagreeing)
    for path in suspects:
        value = mappings[path].value
        if path in out.mappings or path in out.not_comparable or value is None:
            continue
        if value in out.layout.blocked and not out.layout:  # its layout cannot be read back
            out.not_comparable[path] = BLOCKED_NOTE.format(value=value, why=", whose block size could not be read")
            continue
        # the product before a fused op adds a Linear's bias: that Linear's output when value + bias agrees (a
        # parent named by scope at it is judged by where its error reaches, below)
        if out.debiased.get(path, False):
            out.not_comparable[path] = (
                f"not comparable here: its name points at {value!r}, the product before a fused op adds the bias "
                f"(SkipLayerNormalization, BiasGelu); its output has no ONNX value of its own")
            continue
        if path in grouped and grouped[path].first in out.groups and value not in out.layout.blocked:
            continue  # compared as its fused group
        if value in agreed and value not in failing_outputs:  # ONNX Runtime's FusedConv: conv + bn + activation
            out.not_comparable[path] = (
                f"not comparable here: its name points at {value!r}, which agrees with torch as another module's "
                "output (a tool fused this module with what follows); its own output has no ONNX value")
            continue
        if out.plausible.get(path):
            continue  # the re-check by value confirms the name: its output computed differently, a divergence
        if (_downstream(index, value, agreed) | {value}) & disagreeing - ({value} - set(failing_outputs)):
            continue  # its error travels on to something that disagrees: a divergence to report
        out.not_comparable[path] = (
            f"not comparable here: no ONNX value matches its output on sample 0 (a tool optimized or fused the graph "
            f"around it); its name pointed at {value!r}, whose difference reaches no "
            f"{'output' if not failing_outputs else 'diverging value'}")


def _check_other_samples(out: Realignment, torch_backend: TorchBackend, test_model: onnx.ModelProto,
                         submodules, samples: Sequence[dict[str, np.ndarray]],
                         policy: TolerancePolicy, noise: dict[str, float]) -> None:
    """Matches found on the first sample, checked on the rest."""
    if len(samples) < 2 or not out.mappings:
        return
    values = list(dict.fromkeys(m.value for m in out.mappings.values() if m.value))
    session = OnnxRuntimeBackend(test_model, extra_outputs=values, name="onnxruntime-values")
    layout = out.layout
    paths = list(out.mappings)
    for s, feeds in enumerate(samples[1:], start=1):
        capture = torch_backend.capture(feeds, modules=paths)
        got = session.infer(feeds, values)
        for path in paths:
            captured = capture.modules.get(path)
            if captured is None or captured.output is None:
                continue
            target = captured.output
            if path in out.groups:
                target = group_reference(target, submodules[out.groups[path].norm])
            value = str(out.mappings[path].value)
            stats = compare_arrays(layout.plain(value, got[value], target.shape), target,
                                   policy.for_name(path, target.dtype, noise.get(path)))
            out.accumulators[path].stats.append((s, stats))


def apply(realignment: Realignment, mappings: dict[str, ModuleMapping], accumulators: dict[str, LayerAccumulator]) -> None:
    """Write the realignment into the run's mappings and accumulators (in place)."""
    mappings.update(realignment.mappings)
    for path, acc in realignment.accumulators.items():
        accumulators[path] = acc
    for path, why in realignment.not_comparable.items():
        accumulators[path] = LayerAccumulator(note=why)
        mappings[path] = dataclasses.replace(mappings[path], how="unmatched")


def _relaid(out: Realignment, searches: dict[str, _Search], suspects: list[str], mappings: dict[str, ModuleMapping],
            index: GraphIndex) -> None:
    """Suspects named at a blocked NCHWc value whose difference is real (neither matched elsewhere nor set aside):
    compared again in NCHW order (the first comparison read the blocked order), and localized by values."""
    if not out.layout:
        return
    for path in suspects:
        search, value = searches.get(path), mappings[path].value
        if path in out.mappings or path in out.not_comparable or search is None or search.named_stats is None \
                or value not in out.layout.blocked:
            continue
        out.mappings[path] = _mapping(path, str(value), index, how="value", scope=mappings[path].scope)
        out.accumulators[path] = LayerAccumulator(
            stats=[(0, search.named_stats)], note=f"ONNX value {value!r} read back from ONNX Runtime's NCHWc layout")
