"""export-diff: torch eager vs ONNX Runtime (and deployed backends), layer by layer, over several inputs.

One torch forward with hooks and one ONNX Runtime run with the mapped values marked
as extra outputs per sample (split into a few runs only when the marked values
would exceed ``max_intermediate_bytes``).
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import onnx
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils._pytree import tree_flatten

from gapcheck.backends.base import Backend
from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import CaptureResult, TorchBackend, hookable, named_tensor_leaves
from gapcheck.codes.export_diff import ATTRIBUTION_FALLBACK, ONNX_MODEL_MISMATCH, UNOBSERVABLE_MODULES
from gapcheck.compare import NOISE_FACTOR, ErrorStats, TolerancePolicy, compare_arrays
from gapcheck.errors import BackendError, ExportError, InputError, UsageError
from gapcheck.export_diff.batch import check_batchable, check_batches
from gapcheck.export_diff.findings import build_findings
from gapcheck.export_diff.localize import localize, module_boundary
from gapcheck.export_diff.result import (
    FAIL, NO_ONNX, NOT_COMPARABLE, PASS, ExportDiffResult, FirstDivergence, InputRecord, LayerResult, OutputResult,
)
from gapcheck.findings import Finding, Subject
from gapcheck.model.export import ExportResult, condense_error, export_onnx
from gapcheck.model.fit import ModelFit, attribute_by_weights, check_fit
from gapcheck.model.mapping import GraphIndex, ModuleMapping, index_graph, map_modules
from gapcheck.model.precision import FP16_MAX, to_precision
from gapcheck.progress import NullProgress, ProgressReporter
from gapcheck.tensors import contiguous, fingerprint

log = logging.getLogger(__name__)
DEFAULT_MAX_INTERMEDIATE_BYTES = 1 << 30
ORT_NAME = "onnxruntime"


@dataclass
class _LayerAccumulator:
    """Per-module comparisons over samples (mutable while running, frozen into LayerResult at the end)."""

    stats: list[tuple[int, ErrorStats]] = field(default_factory=list)
    overflow_samples: list[int] = field(default_factory=list)
    note: str = ""


def module_source(module: torch.nn.Module) -> str | None:
    """file:line of the module class's forward, for exporters that record no stack traces."""
    if not hookable(module):
        return None  # a ScriptModule's forward is compiled; its class has no Python source to point at
    try:
        forward = type(module).forward
        return f"{inspect.getsourcefile(forward)}:{inspect.getsourcelines(forward)[1]}"
    except (TypeError, OSError, AttributeError):
        return None


def _check_inputs_fit(model: onnx.ModelProto, sample: dict[str, np.ndarray], exported: bool) -> None:
    """Refuse inputs whose names, ranks or static dims do not fit the ONNX graph (exit 2, not a backend failure)."""
    initializers = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    names = [i.name for i in graph_inputs]
    if sorted(names) != sorted(sample):
        if exported:  # the exporter itself lost or renamed an input, e.g. traced it as a constant
            raise ExportError(
                f"the exported graph's inputs ({', '.join(names) or 'none'}) are not the model's inputs "
                f"({', '.join(sample)}): the exporter treated an input as a constant"
            )
        raise InputError(f"the inputs given ({', '.join(sample)}) do not match the ONNX graph's inputs ({', '.join(names)})")
    for value_info in graph_inputs:
        array = sample[value_info.name]
        dims = value_info.type.tensor_type.shape.dim
        if len(dims) != array.ndim:
            raise InputError(f"input {value_info.name!r} has rank {array.ndim}; the ONNX graph expects rank {len(dims)}")
        for axis, dim in enumerate(dims):
            if dim.HasField("dim_value") and dim.dim_value != array.shape[axis]:
                raise InputError(
                    f"input {value_info.name!r} has shape {tuple(array.shape)}; the ONNX graph expects dim {axis} = {dim.dim_value}"
                )


def _check_model_accepts(module: torch.nn.Module, sample: dict[str, np.ndarray]) -> list[str]:
    """Run torch once before exporting, so inputs that do not fit the model are an input error (exit 2).

    Returns the model's own names of its output tensors (``logits``, ``past_key_values.0.key``).
    """
    tensors = [torch.from_numpy(contiguous(a)) for a in sample.values()]
    try:
        with torch.no_grad():
            output = module(*tensors)
    except Exception as exc:  # noqa: BLE001 - whatever the model raises on these inputs
        shapes = ", ".join(f"{k}:{'x'.join(map(str, v.shape))}:{v.dtype}" for k, v in sample.items())
        raise InputError(f"the model does not accept the given inputs ({shapes}): {condense_error(exc)}") from exc
    names = [name for name, _ in named_tensor_leaves(output)]
    if not names:
        raise UsageError(f"the model returns no tensor (it returns {type(output).__name__}): nothing to compare")
    return names


@contextmanager
def evaluation_mode(module: torch.nn.Module, keep_train_mode: bool) -> Iterator[bool]:
    """Compare in eval mode unless asked otherwise; every submodule's own mode is restored afterwards.

    Yields whether the model was handed over in training mode. The caller's model is never left changed.
    """
    modes = [(m, m.training) for m in module.modules()]
    try:
        if not keep_train_mode:
            module.eval()
        yield modes[0][1]
    finally:
        for submodule, training in modes:
            submodule.training = training


def obtain_onnx(
    module: torch.nn.Module,
    sample: dict[str, np.ndarray],
    output_names: Sequence[str],
    *,
    exporter: str,
    opset: int | None,
    cache=None,
    progress: ProgressReporter | None = None,
) -> ExportResult:
    """Export ``module`` (already in the mode to compare), or take it from ``cache`` (an ExportCache) when given."""
    progress = progress or NullProgress()
    if isinstance(module, torch.jit.ScriptModule) and exporter == "dynamo":
        exporter = "torchscript"  # torch.export cannot trace a ScriptModule; the TorchScript exporter reads its graph
    key = cache.key(module, sample, exporter=exporter, opset=opset, output_names=output_names) if cache else None
    if key is not None:
        hit = cache.load(key)
        if hit is not None:
            return hit
    progress.start("exporting to ONNX", None)
    exported = export_onnx(module, sample, exporter=exporter, opset=opset, output_names=output_names)
    progress.finish()
    if key is not None:
        cache.store(key, exported)
    return exported


def _chunks(names: list[str], sizes: dict[str, int], budget: int) -> list[list[str]]:
    """Split marked values into groups whose tensors fit ``budget`` bytes together (one group when they all fit)."""
    groups, current, used = [], [], 0
    for name in names:
        size = sizes.get(name, 0)
        if current and used + size > budget:
            groups.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    return groups + [current] if current else groups


@dataclass
class _SampleRun:
    """What the per-sample loop measured (mutable while it runs)."""

    skeleton: CaptureResult  # execution order, call counts and output counts; arrays dropped
    accumulators: dict[str, _LayerAccumulator]
    output_stats: dict[tuple[str, str], list[tuple[int, ErrorStats]]] = field(default_factory=dict)
    input_records: list[InputRecord] = field(default_factory=list)
    groups: int = 1
    nonfinite_reference: set[str] = field(default_factory=set)  # torch outputs holding NaN/Inf
    session: OnnxRuntimeBackend | None = None  # the single session, kept when one group holds every marked value
    noise: dict[str, float] = field(default_factory=dict)  # max |fp32 - fp64| of torch's own result, sample 0


def _compare_samples(
    torch_backend: TorchBackend,
    test_model: onnx.ModelProto,
    mappings: dict[str, ModuleMapping],
    samples: Sequence[dict[str, np.ndarray]],
    deployed: Sequence[Backend],
    policy: TolerancePolicy,
    precision: str,
    max_intermediate_bytes: int,
    progress: ProgressReporter,
) -> _SampleRun:
    """Per sample: one torch forward with hooks and one ORT run with the mapped values marked as outputs.

    When the marked values of one sample exceed ``max_intermediate_bytes``, they are split into groups;
    groups run one after another (outer loop), each with its own session, and each group's values are
    compared and dropped before the next, so memory stays near one group's worth.
    ``mappings`` is updated in place when a folded Conv+BatchNorm needs remapping.
    """
    module_paths = list(mappings)
    submodules = dict(torch_backend.module.named_modules())
    unmapped_bn = [p for p, m in mappings.items() if not m.mapped and isinstance(submodules[p], _BatchNorm)]
    output_names = torch_backend.output_names
    try:
        first = torch_backend.capture(
            samples[0], modules=[p for p, m in mappings.items() if m.mapped] + unmapped_bn, order_of=module_paths
        )
    except BackendError as exc:  # torch itself refuses these inputs: an input error, not a backend failure
        raise InputError(f"the model does not accept the given inputs: {exc.message}") from exc
    mappings.update(_move_folded_batchnorms(mappings, first, submodules))
    mapped_paths = [p for p, m in mappings.items() if m.mapped]
    sizes = {mappings[p].value: c.output.nbytes for p, c in first.modules.items() if c.output is not None and mappings[p].mapped}
    groups = _chunks(list(sizes), sizes, max_intermediate_bytes) or [[]]
    run = _SampleRun(skeleton=first.without_arrays(), accumulators={p: _LayerAccumulator() for p in module_paths},
                     groups=len(groups))
    if len(groups) > 1:
        first = None  # recaptured per group: holding every module's output would defeat the budget
    progress.start(f"comparing {len(mapped_paths)} modules", len(samples) * len(groups))
    measure_noise = precision == "fp32"
    for g, group in enumerate(groups):
        session = OnnxRuntimeBackend(test_model, extra_outputs=group, name=ORT_NAME)
        in_group = set(group)
        group_paths = [p for p in mapped_paths if mappings[p].value in in_group]
        for s, feeds in enumerate(samples):
            capture = first if s == 0 and first is not None else torch_backend.capture(feeds, modules=group_paths)
            if s == 0 and measure_noise:  # once, on the first sample: the rounding noise each tensor carries
                run.noise.update(torch_backend.noise_floor(feeds, capture, group_paths))
            values = session.infer(feeds, (output_names if g == 0 else []) + group)
            for path in group_paths:
                _compare_layer(run.accumulators[path], capture, path, mappings[path].value, values, s, policy, precision,
                               run.noise.get(path))
            if g == 0:
                _compare_outputs(run, capture, values, session.last_input_fingerprints, feeds, s, deployed, policy)
            progress.advance()
        if len(groups) == 1:
            run.session = session
    progress.finish()
    return run


def _move_folded_batchnorms(mappings: dict[str, ModuleMapping], capture: CaptureResult, submodules) -> dict[str, ModuleMapping]:
    """Remap Conv+BatchNorm folded by the TorchScript exporter.

    The TorchScript exporter folds a BatchNorm into the Conv that feeds it and keeps the
    Conv's scope name, so the Conv's ONNX value holds the BatchNorm's output. (The dynamo
    exporter keeps the BatchNorm's scope instead, which needs no remapping.) A BatchNorm
    without ONNX nodes that ran right after a mapped Conv takes over the Conv's value.
    """
    by_order = {c.order: p for p, c in capture.modules.items()}
    moved: dict[str, ModuleMapping] = {}
    for path, captured in capture.modules.items():
        if mappings[path].mapped or not isinstance(submodules[path], _BatchNorm):
            continue
        previous = by_order.get(captured.order - 1)
        if previous and mappings[previous].op_types == ("Conv",) and isinstance(submodules[previous], nn.modules.conv._ConvNd):
            moved[path] = dataclasses.replace(mappings[previous], module=path, scope=previous)
            moved[previous] = ModuleMapping(previous, None, (), (), None)
    return moved


def _compare_layer(acc: _LayerAccumulator, capture: CaptureResult, path: str, value: str, values, s: int,
                   policy: TolerancePolicy, precision: str, noise: float | None = None) -> None:
    captured = capture.modules.get(path)
    if captured is None or captured.output is None or value not in values:
        return
    reference, actual = captured.output, values[value]
    if actual.shape != reference.shape:
        acc.note = f"ONNX value {value} has shape {actual.shape}, torch {reference.shape}"
        return
    stats = compare_arrays(actual, reference, policy.for_name(path, reference.dtype, noise))
    acc.stats.append((s, stats))
    if precision == "fp16" and (stats.nonfinite_mismatch or stats.expected_absmax > FP16_MAX):
        acc.overflow_samples.append(s)


def _compare_outputs(run: _SampleRun, capture: CaptureResult, ort_values, ort_fed: dict[str, str], feeds, s: int,
                     deployed, policy) -> None:
    """Graph outputs of ONNX Runtime and of every deployed backend vs torch; input fingerprints per backend.

    Each backend reports the SHA256 of what it actually fed; a backend that cannot say is marked "unknown".
    """
    deployed_values, deployed_fed = {}, {}
    for backend in deployed:
        deployed_values[backend.name] = backend.infer(feeds)
        deployed_fed[backend.name] = dict(getattr(backend, "last_input_fingerprints", None) or {})
    for name, array in feeds.items():
        hashes = {"torch": capture.input_fingerprints.get(name, "unknown"), ORT_NAME: ort_fed.get(name, "unknown")}
        for backend_name, fed in deployed_fed.items():
            hashes[backend_name] = fed.get(name, "unknown")
        run.input_records.append(InputRecord(s, name, tuple(array.shape), str(array.dtype), hashes))
    for backend_name, values in [(ORT_NAME, ort_values)] + list(deployed_values.items()):
        for name in capture.outputs:
            actual = values.get(name)
            if actual is None:
                raise BackendError(f"{backend_name} returned no output named {name!r} (it returned {sorted(values)})")
            reference = capture.outputs[name]
            if np.issubdtype(reference.dtype, np.floating) and not np.isfinite(reference).all():
                run.nonfinite_reference.add(name)
            stats = compare_arrays(actual, reference, policy.for_name(name, reference.dtype, run.noise.get(name)))
            run.output_stats.setdefault((backend_name, name), []).append((s, stats))


@dataclass(frozen=True)
class _Plan:
    """What is compared with what: the ONNX model, its index, the module mapping, and what could not be mapped."""

    exported: ExportResult
    test_model: onnx.ModelProto
    index: GraphIndex
    module_paths: list[str]
    mappings: dict[str, ModuleMapping]
    output_names: list[str]
    fit: ModelFit
    notes: tuple[Finding, ...]


def export_diff(
    module: torch.nn.Module,
    samples: Sequence[dict[str, np.ndarray]],
    *,
    onnx_model: onnx.ModelProto | None = None,
    exported: ExportResult | None = None,
    exporter: str = "dynamo",
    opset: int | None = None,
    tolerances: TolerancePolicy | None = None,
    precision: str = "fp32",
    batch_sizes: Sequence[int] = (),
    keep_train_mode: bool = False,
    deployed: Sequence[Backend] = (),
    max_intermediate_bytes: int = DEFAULT_MAX_INTERMEDIATE_BYTES,
    progress: ProgressReporter | None = None,
    batch_pool: Sequence[dict[str, np.ndarray]] | None = None,
    cache=None,
) -> ExportDiffResult:
    """Compare ``module`` (torch eager, the reference) with its ONNX export in ONNX Runtime, module by module.

    ``samples`` are dicts of named input arrays, fed to ``forward`` positionally in
    dict order. ``onnx_model`` compares an existing ONNX model instead of exporting;
    ``exported`` is an export already made from this module (e.g. for a deployment audit).
    ``deployed`` backends (e.g. Triton) are compared on the final outputs. Batch checks
    draw their rows from ``batch_pool`` (default: ``samples``). ``cache`` (an
    :class:`~gapcheck.model.cache.ExportCache`) reuses an earlier identical export.
    The model is compared in eval mode (unless ``keep_train_mode``) and handed back as it came.
    """
    if not samples:
        raise UsageError("export-diff needs at least one input sample")
    check_batchable(batch_pool or samples, batch_sizes)
    progress = progress or NullProgress()
    policy = tolerances or TolerancePolicy(precision=precision)
    with evaluation_mode(module, keep_train_mode) as was_training:
        torch_names = _check_model_accepts(module, samples[0])  # before exporting: bad inputs are exit 2
        if onnx_model is not None:
            exported = ExportResult(onnx_model, "file", None, 0.0)
        elif exported is None:
            exported = obtain_onnx(module, samples[0], torch_names, exporter=exporter, opset=opset, cache=cache,
                                   progress=progress)
        plan = _plan(module, exported, samples[0], torch_names, precision, from_file=onnx_model is not None)
        torch_backend = TorchBackend(module, list(samples[0]), plan.output_names)
        start = time.perf_counter()
        run = _compare_samples(torch_backend, plan.test_model, plan.mappings, samples, deployed, policy, precision,
                               max_intermediate_bytes, progress)
        compare_s = time.perf_counter() - start
        return _assemble(module, plan, run, torch_backend, samples, policy, precision, batch_sizes, batch_pool,
                         was_training, keep_train_mode, progress, compare_s)


def _plan(module, exported: ExportResult, sample, torch_names: list[str], precision: str, from_file: bool) -> _Plan:
    """Index the graph against the model's module paths, map modules to values, and check a foreign file's fit."""
    reference_model = exported.model
    _check_inputs_fit(reference_model, sample, exported=not from_file)
    module_paths = [path for path, _ in module.named_modules() if path]
    index = index_graph(reference_model, module_paths)
    mappings = map_modules(reference_model, module_paths, index)
    onnx_outputs = list(index.graph_outputs)
    fit = check_fit(reference_model, module, len(torch_names), index.unknown_scopes) if from_file else ModelFit()
    notes: list[Finding] = []
    if from_file and not index.has_scopes and fit.fits:
        by_weights = attribute_by_weights(reference_model, module, index)
        mappings.update(by_weights)
        # Give the attributed nodes their module's scope, so localization can cut the module's subgraph.
        scopes = list(index.scopes)
        node_ids = {n.name: i for i, n in enumerate(reference_model.graph.node)}
        for path, mapping in by_weights.items():
            for name in mapping.node_names:
                scopes[node_ids[name]] = (path,)
        index = dataclasses.replace(index, scopes=tuple(scopes))
        notes.append(ATTRIBUTION_FALLBACK.finding(
            f"the ONNX graph carries no module scopes (simplified or renamed): {len(by_weights)} of {len(module_paths)} "
            "modules attributed by their weights, found in the graph with the same values; the rest are compared "
            "through the outputs", where="onnx",
            subject=Subject(other="onnx"), evidence={"attributed_by_weights": sorted(by_weights)}))
    unobservable = [p for p, m in module.named_modules() if p and not hookable(m)]
    if isinstance(module, torch.jit.ScriptModule) or unobservable:
        shown = ", ".join(unobservable[:5]) + (", ..." if len(unobservable) > 5 else "")
        what = "the model is a TorchScript module" if isinstance(module, torch.jit.ScriptModule) else \
            f"{len(unobservable)} TorchScript submodules ({shown})"
        notes.append(UNOBSERVABLE_MODULES.finding(
            f"{what}: TorchScript modules take no forward hooks, so they are compared at the model's outputs and at "
            "the Python modules around them only", where=shown or "model",
            subject=Subject(module=shown or None), evidence={"unobservable": unobservable}))
        for path in unobservable:
            mappings[path] = ModuleMapping(path, None, (), (), None)
    if fit.fits and len(onnx_outputs) == len(torch_names):
        output_names = onnx_outputs
    else:  # compare the outputs both sides name alike; the finding says the graph does not fit
        output_names = onnx_outputs if len(onnx_outputs) == len(torch_names) else torch_names
    test_model = to_precision(reference_model, precision)
    return _Plan(exported, test_model, index, module_paths, mappings, output_names, fit, tuple(notes))


def _assemble(module, plan: _Plan, run: "_SampleRun", torch_backend, samples, policy, precision, batch_sizes,
              batch_pool, was_training, keep_train_mode, progress, compare_s) -> ExportDiffResult:
    """Layer and output records, the first divergence, batch checks and findings, as one result."""
    accumulators, mappings = run.accumulators, plan.mappings
    layers = _layer_results(module, plan.module_paths, mappings, run.skeleton, accumulators, run.noise)
    outputs = tuple(
        OutputResult(
            name=name,
            backend=backend_name,
            status=PASS if all(st.passed for _, st in runs) else FAIL,
            stats=_worst(runs)[1],
            worst_sample=_worst(runs)[0],
            failing_samples=tuple(s for s, st in runs if not st.passed),
            note=_noise_note(run.noise.get(name)),
        )
        for (backend_name, name), runs in run.output_stats.items()
    )
    test_index = plan.index if plan.test_model is plan.exported.model else index_graph(plan.test_model, plan.module_paths)
    # An ONNX graph of another model: attributing its differences to this model's modules would mislead.
    first_divergence = None if not plan.fit.fits else _first_divergence(
        layers, mappings, test_index, plan.test_model, torch_backend, samples, policy, run.noise)
    batch_checks = ()
    if batch_sizes:
        progress.start("checking batch sizes", len(batch_sizes))
        plain_ort = run.session or OnnxRuntimeBackend(plan.test_model)
        batch_checks = tuple(check_batches(torch_backend, plain_ort, batch_pool or samples, batch_sizes, policy, progress))
        progress.finish()
    findings = list(plan.notes)
    if not plan.fit.fits:
        findings.append(ONNX_MODEL_MISMATCH.finding(
            f"the ONNX graph does not fit this model: {'; '.join(plan.fit.evidence)}; differences are not attributed",
            where="onnx", subject=Subject(other="onnx"), evidence=plan.fit.details))
    if torch_backend.noise_note:
        layers = tuple(dataclasses.replace(x, note=(x.note + "; " if x.note else "") + torch_backend.noise_note)
                       if x is layers[0] else x for x in layers) if layers else layers
    findings += build_findings(
        layers=layers,
        outputs=outputs,
        first_divergence=first_divergence,
        batch_checks=batch_checks,
        exported=plan.exported,
        was_training=was_training,
        kept_train_mode=keep_train_mode,
        module=module,
        precision=precision,
        overflow={p: acc.overflow_samples for p, acc in accumulators.items() if acc.overflow_samples},
        layer_order=[layer.module for layer in layers],
        num_samples=len(samples),
        reference_backend=ORT_NAME,
        nonfinite_outputs=sorted(run.nonfinite_reference),
    )
    timings = {"export_s": plan.exported.seconds, "compare_s": compare_s, "ort_runs_per_sample": run.groups}
    return ExportDiffResult(
        findings=tuple(findings),
        layers=layers,
        outputs=outputs,
        first_divergence=first_divergence,
        inputs=tuple(run.input_records),
        exporter=plan.exported.exporter,
        fallback_reason=plan.exported.fallback_reason,
        precision=precision,
        num_samples=len(samples),
        batch_checks=batch_checks,
        timings=timings,
        onnx_model=plan.exported.model,
    )


def _noise_note(noise: float | None) -> str:
    """How the layer's budget was set, when the float64 noise floor widened it."""
    return f"fp32 noise floor {noise:.2g} (budget atol = max(default, {NOISE_FACTOR:g}x))" if noise else ""


def _worst(runs: list[tuple[int, ErrorStats]]) -> tuple[int | None, ErrorStats | None]:
    if not runs:
        return None, None
    return max(runs, key=lambda r: (not r[1].passed, r[1].shape_mismatch, r[1].nonfinite_mismatch, r[1].error_ratio))


def _layer_results(module, module_paths, mappings: dict[str, ModuleMapping], first: CaptureResult, accumulators,
                   noise: dict[str, float]) -> tuple[LayerResult, ...]:
    submodules = dict(module.named_modules())
    executed = sorted((c.order, p) for p, c in first.modules.items())
    never_ran = [p for p in module_paths if p not in first.modules]
    rows = []
    for order, path in [(o, p) for o, p in executed] + [(-1, p) for p in never_ran]:
        mapping = mappings[path]
        acc = accumulators[path]
        captured = first.modules.get(path)
        note = acc.note
        if not mapping.mapped:
            status, note = NO_ONNX, note or "no ONNX counterpart (fused into a neighbour, identity, or not executed)"
        elif not acc.stats:
            status = NOT_COMPARABLE
            if captured is not None and captured.output_count != 1:
                note = note or f"returns {captured.output_count} tensors; compared through its consumers"
        else:
            status = PASS if all(st.passed for _, st in acc.stats) else FAIL
        if captured is not None and captured.calls > 1:
            note = (note + "; " if note else "") + f"called {captured.calls} times, last call compared"
        if mapping.mapped and mapping.owner != path:
            note = (note + "; " if note else "") + f"folded with {mapping.owner} into one ONNX op"
        if mapping.how == "weights":
            note = (note + "; " if note else "") + "attributed by its weights (the graph names no modules)"
        worst_sample, stats = _worst(acc.stats)
        rows.append(
            LayerResult(
                order=order,
                module=path,
                class_name=type(submodules[path]).__name__,
                op_types=mapping.op_types,
                onnx_value=mapping.value,
                status=status,
                stats=stats,
                worst_sample=worst_sample,
                failing_samples=tuple(s for s, st in acc.stats if not st.passed),
                source=mapping.source or module_source(submodules[path]),
                note=note,
            )
        )
    return tuple(rows)


def _first_divergence(layers, mappings, index: GraphIndex, test_model, torch_backend: TorchBackend, samples, policy,
                      noise: dict[str, float]) -> FirstDivergence | None:
    failing = [layer for layer in layers if layer.status == FAIL]
    if not failing:
        return None
    layer = failing[0]
    mapping = mappings[layer.module]
    sample = layer.worst_sample or 0
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
    )
