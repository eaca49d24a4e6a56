"""FP16: rank the modules by the error they introduce, keep the fewest in FP32, write the model, verify it.

One layer-wise run (:func:`analyze`), per sample: torch with hooks (the reference), the FP32 export with every value
marked (the values beyond FP16's range, and the reference inputs of each module's ONNX ops), and the FP16 model with
every value marked (each module's error against torch, its overflow and underflow counts). A module that fails is
re-run alone — its FP16 ops fed the reference inputs — so its *local* error is what it introduces, not what it
inherits. The fix (:func:`fix`) keeps in FP32 the nodes that produce or consume values beyond FP16's range and the
innermost modules that fail locally, converts with onnxconverter-common's ``node_block_list`` (I/O types kept), and
verifies the written model with the same comparison; a module that still fails is added and the model verified
again, up to ``max_runs`` verifications in all.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import CaptureResult, TorchBackend
from gapcheck.compare import ErrorStats, TolerancePolicy, compare_arrays
from gapcheck.errors import BackendError
from gapcheck.export_diff.localize import extract_subgraph
from gapcheck.model.mapping import index_graph
from gapcheck.model.precision import FP16_MAX, to_precision
from gapcheck.precision.graph import ROOT, Graph, ValueRunner, value_map, value_names
from gapcheck.tensors import contiguous

FP16_TINY = 2.0 ** -24  # the smallest FP16 subnormal: a non-zero value below it becomes 0
MAX_LOCAL_RERUNS = 48  # failing modules re-run alone per sample (the rest are ranked by their error in the run)


@dataclass(frozen=True)
class ModuleRow:
    """One module's record in a precision run; ``sensitivity`` is what the ranking sorts by (see the result)."""

    module: str
    class_name: str
    nodes: tuple[str, ...]
    ratio: float | None  # worst error ratio (FP16) / relative L2 error (INT8) at its output
    local: float | None  # FP16: local error ratio, its ops fed the reference inputs; INT8: error added over its inputs
    overflow: int = 0  # non-finite values where the reference is finite
    underflow: int = 0  # reference values in (0, 2**-24): FP16 flushes them to zero
    out_of_range: float = 0.0  # share of the reference's values beyond 65504 at its output
    passed: bool = True
    sensitivity: float = 0.0
    alone: float | None = None  # INT8: the outputs' relative L2 error with only this module quantized


@dataclass(frozen=True)
class KeptGroup:
    """Nodes kept in FP32, by the module that owns them, and why."""

    module: str
    nodes: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Verification:
    passed: bool
    failing: tuple[str, ...]  # modules and outputs that miss the tolerance, in execution order
    worst: str  # the worst one, as text ("" when it passes)


@dataclass(frozen=True)
class Analysis:
    rows: tuple[ModuleRow, ...]  # ranked, most sensitive first
    hot_values: tuple[str, ...]  # values beyond FP16's range in the reference run
    verification: Verification  # the plain FP16 model, layer by layer


@dataclass(frozen=True)
class Fix:
    kept: tuple[KeptGroup, ...]
    block_list: tuple[str, ...]
    verification: Verification
    runs: int  # verification runs made
    model: onnx.ModelProto


def reference(module, samples: Sequence[dict[str, np.ndarray]], graph: Graph,
              output_names: Sequence[str]) -> list[CaptureResult]:
    """torch's outputs of every mapped module, per sample (the reference every run is compared with)."""
    backend = TorchBackend(module, list(samples[0]), list(output_names))
    mapped = [p for p, m in graph.mappings.items() if m.mapped]
    return [backend.capture(s, modules=mapped) for s in samples]


def _hot(values: dict[str, np.ndarray]) -> set[str]:
    """Values with a finite element beyond FP16's range."""
    hot = set()
    for name, array in values.items():
        if array.dtype.kind == "f" and array.size:
            finite = np.abs(array[np.isfinite(array)]) if not np.isfinite(array).all() else np.abs(array)
            if finite.size and float(finite.max()) > FP16_MAX:
                hot.add(name)
    return hot


def _hot_constants(model: onnx.ModelProto) -> set[str]:
    """Float initializers with a value beyond FP16's range (the converter clamps them to 65504)."""
    from onnx import numpy_helper

    return _hot({i.name: numpy_helper.to_array(i) for i in model.graph.initializer
                 if i.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)})


def _as_float(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float32) if array.dtype == np.float16 else array


class _Acc:
    """A module's statistics over the samples."""

    def __init__(self) -> None:
        self.stats: list[ErrorStats] = []
        self.local: float | None = None
        self.overflow = self.underflow = 0
        self.out_of_range = 0.0

    def add(self, actual: np.ndarray, expected: np.ndarray, stats: ErrorStats) -> None:
        self.stats.append(stats)
        finite = np.isfinite(expected)
        self.overflow += int(np.count_nonzero(~np.isfinite(actual) & finite)) if actual.shape == expected.shape else 0
        magnitude = np.abs(np.where(finite, expected, 0))
        self.underflow += int(np.count_nonzero((magnitude > 0) & (magnitude < FP16_TINY)))
        self.out_of_range = max(self.out_of_range, float(np.mean(magnitude > FP16_MAX)) if magnitude.size else 0.0)


def analyze(module, graph: Graph, samples: Sequence[dict[str, np.ndarray]], refs: Sequence[CaptureResult],
            policy: TolerancePolicy) -> Analysis:
    """The one layer-wise FP16 run (see the module docstring)."""
    names = value_names(graph.model)
    fp32 = ValueRunner(graph.model, names)
    fp16_model = to_precision(graph.model, "fp16")
    fp16 = ValueRunner(fp16_model, names)
    fp16_index = index_graph(fp16_model)
    accs = {p: _Acc() for p, m in graph.mappings.items() if m.mapped}
    hot = _hot_constants(graph.model)
    for feeds, ref in zip(samples, refs, strict=True):
        f32, f16 = fp32.run(feeds), fp16.run(feeds)
        hot |= _hot(f32)
        failing = []
        for path, acc in accs.items():
            captured = ref.modules.get(path)
            value = graph.mappings[path].value
            if captured is None or captured.output is None or value not in f16:
                continue
            stats = compare_arrays(_as_float(f16[value]), captured.output, policy.for_name(path))
            acc.add(_as_float(f16[value]), captured.output, stats)
            if not stats.passed:
                failing.append(path)
        for path in failing[:MAX_LOCAL_RERUNS]:
            local = _local_ratio(graph, fp16_model, fp16_index, path, f32, f16, ref, policy)
            if local is not None:
                accs[path].local = max(accs[path].local or 0.0, local)
    rows = [_row(module, graph, path, acc, hot) for path, acc in accs.items() if acc.stats]
    rows.sort(key=lambda r: (-r.sensitivity, -(r.ratio or 0.0), r.module))
    return Analysis(tuple(rows), tuple(sorted(hot)), _plain_verification(rows, refs, fp16, samples, policy))


def _row(module, graph: Graph, path: str, acc: _Acc, hot: set[str]) -> ModuleRow:
    submodules = dict(module.named_modules())
    worst = max(acc.stats, key=lambda s: s.error_ratio)
    mapping = graph.mappings[path]
    nodes = set(mapping.node_names)
    touches_hot = any(graph.producer_of(v) in nodes for v in hot)
    # What the ranking sorts by: an overflow first (it breaks the model whatever else holds), then the local error.
    sensitivity = math.inf if (acc.overflow and touches_hot) else (acc.local if acc.local is not None else 0.0)
    return ModuleRow(module=path, class_name=type(submodules[path]).__name__, nodes=mapping.node_names,
                     ratio=worst.error_ratio, local=acc.local, overflow=acc.overflow, underflow=acc.underflow,
                     out_of_range=acc.out_of_range, passed=all(s.passed for s in acc.stats), sensitivity=sensitivity)


def _local_ratio(graph: Graph, fp16_model: onnx.ModelProto, fp16_index, path: str, f32: dict[str, np.ndarray],
                 f16: dict[str, np.ndarray], ref: CaptureResult, policy: TolerancePolicy) -> float | None:
    """The module's FP16 ops fed the reference (FP32) values at their boundary: its own error ratio."""
    mapping = graph.mappings[path]
    members = set(mapping.node_names)
    nodes = {n.name: n for n in graph.model.graph.node}
    produced = {o for name in members for o in nodes[name].output}
    feeds: dict[str, np.ndarray] = {}
    for name in members:
        for value in nodes[name].input:
            if not value or value in produced or value in graph.index.initializers or value not in f32:
                continue
            array = f32[value]
            with np.errstate(over="ignore"):  # a value beyond FP16's range becomes Inf, as the FP16 model has it
                feeds[value] = contiguous(array.astype(f16[value].dtype) if value in f16 else array)
    for value in graph.index.graph_inputs & {v for n in members for v in nodes[n].input}:
        feeds.setdefault(value, contiguous(f32.get(value, np.empty(0))))
    feeds = {k: v for k, v in feeds.items() if v.size or k not in graph.index.graph_inputs}
    captured = ref.modules[path].output
    if captured is None:
        return None
    try:
        sub = extract_subgraph(fp16_model, fp16_index, feeds, mapping.value or "")
        used = {i.name for i in sub.graph.input}
        result = OnnxRuntimeBackend(sub, name="fp16-module").infer({k: v for k, v in feeds.items() if k in used})
    except BackendError:
        return None  # a subgraph ONNX Runtime cannot run alone: ranked by its error in the whole run
    return compare_arrays(_as_float(result[mapping.value or ""]), captured, policy.for_name(path)).error_ratio


def _plain_verification(rows: list[ModuleRow], refs, runner: ValueRunner, samples, policy) -> Verification:
    """The plain FP16 model's verdict, from the run already made (its outputs compared here)."""
    failing_modules = [r.module for r in rows if not r.passed]
    out_fail, worst = _outputs_failing(runner, samples, refs, policy)
    order = {p: c.order for p, c in refs[0].modules.items()}
    failing = sorted(failing_modules, key=lambda p: order.get(p, 1 << 30)) + out_fail
    ranked = max(rows, key=lambda r: r.ratio or 0.0, default=None)
    text = worst or (f"{ranked.module}: error ratio {ranked.ratio:.3g}" if ranked and failing_modules else "")
    return Verification(not failing, tuple(failing), text if failing else "")


def _outputs_failing(runner: ValueRunner, samples, refs, policy) -> tuple[list[str], str]:
    failing: dict[str, float] = {}
    for feeds, ref in zip(samples, refs, strict=True):
        got = runner.run(feeds)
        for name, expected in ref.outputs.items():
            if name not in got:
                continue
            stats = compare_arrays(_as_float(got[name]), expected, policy.for_name(name, expected.dtype))
            if not stats.passed:
                failing[f"output {name}"] = max(failing.get(f"output {name}", 0.0), stats.error_ratio)
    worst = max(failing, key=failing.__getitem__, default="")
    return list(failing), f"{worst}: error ratio {failing[worst]:.3g}" if worst else ""


def verify(graph: Graph, model: onnx.ModelProto, samples, refs: Sequence[CaptureResult],
           policy: TolerancePolicy) -> Verification:
    """The written model, compared layer by layer with torch: every mapped module and every output."""
    mapped = [p for p, m in graph.mappings.items() if m.mapped]
    renamed = value_map(graph.model, model)
    wanted = {p: renamed.get(graph.mappings[p].value or "", "") for p in mapped}
    runner = ValueRunner(model, [v for v in wanted.values() if v])
    worst: dict[str, float] = {}
    for feeds, ref in zip(samples, refs, strict=True):
        got = runner.run(feeds)
        for path in mapped:
            captured, value = ref.modules.get(path), wanted[path]
            if captured is None or captured.output is None or value not in got:
                continue
            stats = compare_arrays(_as_float(got[value]), captured.output, policy.for_name(path))
            if not stats.passed:
                worst[path] = max(worst.get(path, 0.0), stats.error_ratio)
        for name, expected in ref.outputs.items():
            if name in got:
                stats = compare_arrays(_as_float(got[name]), expected, policy.for_name(name, expected.dtype))
                if not stats.passed:
                    worst[f"output {name}"] = max(worst.get(f"output {name}", 0.0), stats.error_ratio)
    order = {p: c.order for p, c in refs[0].modules.items()}
    failing = sorted(worst, key=lambda p: order.get(p, 1 << 30))
    top = max(worst, key=worst.__getitem__, default="")
    return Verification(not failing, tuple(failing), f"{top}: error ratio {worst[top]:.3g}" if top else "")


def initial_groups(graph: Graph, analysis: Analysis) -> list[KeptGroup]:
    """The first choice: nodes that produce or consume values beyond FP16's range, and the innermost modules whose
    own FP16 ops fail when fed the reference inputs."""
    nodes = {n.name: i for i, n in enumerate(graph.model.graph.node)}
    by_owner: dict[str, dict[str, str]] = {}
    for value in analysis.hot_values:
        producer = graph.producer_of(value)
        if producer is not None:
            by_owner.setdefault(graph.owner(nodes[producer]), {})[producer] = "its output exceeds FP16's range"
        for consumer in graph.consumers_of(value):
            by_owner.setdefault(graph.owner(nodes[consumer]), {}).setdefault(
                consumer, "it consumes values beyond FP16's range")
    groups = [KeptGroup(owner, tuple(sorted(named, key=nodes.__getitem__)), "; ".join(sorted(set(named.values()))))
              for owner, named in by_owner.items()]
    blocked = {n for g in groups for n in g.nodes}
    local = [r for r in analysis.rows if r.local is not None and r.local > 1 and not set(r.nodes) <= blocked
             and not (r.overflow and set(r.nodes) & blocked)]
    innermost = [r for r in local if not any(o.module.startswith(r.module + ".") for o in local)]
    groups += [KeptGroup(r.module, tuple(n for n in r.nodes if n not in blocked),
                         f"its FP16 ops miss the tolerance on the reference inputs (local error ratio {r.local:.3g})")
               for r in innermost]
    return groups


def fix(graph: Graph, analysis: Analysis, samples, refs: Sequence[CaptureResult], policy: TolerancePolicy,
        max_runs: int = 3) -> Fix:
    """Keep the fewest modules in FP32 that make the model pass (see the module docstring); verified, or not."""
    groups = initial_groups(graph, analysis)
    if not groups:  # nothing overflows nor fails locally: start from the first module that fails
        groups = _next_group(graph, analysis.verification, [], refs)
    runs, model, verification = 0, graph.model, analysis.verification
    while groups and runs < max_runs:
        block = tuple(dict.fromkeys(n for g in groups for n in g.nodes))
        model = to_precision(graph.model, "fp16", keep_fp32=block)
        verification = verify(graph, model, samples, refs, policy)
        runs += 1
        if verification.passed:
            break
        more = _next_group(graph, verification, groups, refs)
        if not more:
            break
        groups += more
    block = tuple(dict.fromkeys(n for g in groups for n in g.nodes))
    return Fix(tuple(_merge(groups)), block, verification, runs, model)


def _next_group(graph: Graph, verification: Verification, groups: list[KeptGroup], refs) -> list[KeptGroup]:
    """The first module (in execution order) that still fails and is not all FP32 yet."""
    blocked = {n for g in groups for n in g.nodes}
    for path in verification.failing:
        mapping = graph.mappings.get(path)
        if mapping is None or not mapping.node_names:
            continue
        rest = tuple(n for n in mapping.node_names if n not in blocked)
        if rest:
            return [KeptGroup(path, rest, "it still missed the tolerance when the model was verified")]
    return []


def _merge(groups: list[KeptGroup]) -> list[KeptGroup]:
    merged: dict[str, KeptGroup] = {}
    for g in groups:
        old = merged.get(g.module)
        merged[g.module] = g if old is None else KeptGroup(
            g.module, tuple(dict.fromkeys(old.nodes + g.nodes)), "; ".join(dict.fromkeys([old.reason, g.reason])))
    return list(merged.values())


def tensorrt_settings(block: Sequence[str], onnx_path: str = "model.onnx") -> dict[str, str]:
    """The same choice for TensorRT users (its ONNX parser names layers after the ONNX nodes); not executed here."""
    layers = ",".join(f"{name}:fp32" for name in block)
    poly = " ".join(f"{name}:float32" for name in block)
    return {
        "trtexec": f"trtexec --onnx={onnx_path} --fp16 --precisionConstraints=obey --layerPrecisions={layers}"
                   f" --layerOutputTypes={layers}",
        "polygraphy": f"polygraphy convert {onnx_path} --fp16 --precision-constraints obey --layer-precisions {poly}"
                      " -o model.engine",
        "note": "not executed: no GPU here; run on the FP32 export (--save-onnx), which TensorRT converts itself",
    }


__all__ = ["ROOT", "Analysis", "Fix", "KeptGroup", "ModuleRow", "Verification", "analyze", "fix", "reference",
           "tensorrt_settings", "verify"]
