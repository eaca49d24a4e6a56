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
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import onnx
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils._pytree import tree_flatten

from gapcheck.backends.base import Backend
from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import CaptureResult, TorchBackend
from gapcheck.compare import ErrorStats, TolerancePolicy, compare_arrays
from gapcheck.errors import BackendError, ExportError, InputError, UsageError
from gapcheck.export_diff.batch import check_batchable, check_batches
from gapcheck.export_diff.findings import build_findings
from gapcheck.export_diff.localize import localize, module_boundary
from gapcheck.export_diff.result import (
    FAIL, NO_ONNX, NOT_COMPARABLE, PASS, ExportDiffResult, FirstDivergence, InputRecord, LayerResult, OutputResult,
)
from gapcheck.model.export import ExportResult, condense_error, export_onnx
from gapcheck.model.mapping import GraphIndex, ModuleMapping, index_graph, map_modules
from gapcheck.model.precision import FP16_MAX, to_precision
from gapcheck.progress import NullProgress, ProgressReporter
from gapcheck.tensors import fingerprint

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
    try:
        forward = type(module).forward
        return f"{inspect.getsourcefile(forward)}:{inspect.getsourcelines(forward)[1]}"
    except (TypeError, OSError):
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


def _check_model_accepts(module: torch.nn.Module, sample: dict[str, np.ndarray]) -> None:
    """Run torch once before exporting, so inputs that do not fit the model are an input error (exit 2)."""
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in sample.values()]
    try:
        with torch.no_grad():
            output = module(*tensors)
    except Exception as exc:  # noqa: BLE001 - whatever the model raises on these inputs
        shapes = ", ".join(f"{k}:{'x'.join(map(str, v.shape))}:{v.dtype}" for k, v in sample.items())
        raise InputError(f"the model does not accept the given inputs ({shapes}): {condense_error(exc)}") from exc
    if not any(isinstance(leaf, torch.Tensor) for leaf in tree_flatten(output)[0]):
        raise UsageError(f"the model returns no tensor (it returns {type(output).__name__}): nothing to compare")


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
    for g, group in enumerate(groups):
        session = OnnxRuntimeBackend(test_model, extra_outputs=group, name=ORT_NAME)
        in_group = set(group)
        group_paths = [p for p in mapped_paths if mappings[p].value in in_group]
        for s, feeds in enumerate(samples):
            capture = first if s == 0 and first is not None else torch_backend.capture(feeds, modules=group_paths)
            values = session.infer(feeds, (output_names if g == 0 else []) + group)
            for path in group_paths:
                _compare_layer(run.accumulators[path], capture, path, mappings[path].value, values, s, policy, precision)
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
            moved[path] = dataclasses.replace(mappings[previous], module=path)
            moved[previous] = ModuleMapping(previous, None, (), (), None)
    return moved


def _compare_layer(acc: _LayerAccumulator, capture: CaptureResult, path: str, value: str, values, s: int,
                   policy: TolerancePolicy, precision: str) -> None:
    captured = capture.modules.get(path)
    if captured is None or captured.output is None or value not in values:
        return
    reference, actual = captured.output, values[value]
    if actual.shape != reference.shape:
        acc.note = f"ONNX value {value} has shape {actual.shape}, torch {reference.shape}"
        return
    stats = compare_arrays(actual, reference, policy.for_name(path, reference.dtype))
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
            stats = compare_arrays(actual, reference, policy.for_name(name, reference.dtype))
            run.output_stats.setdefault((backend_name, name), []).append((s, stats))


def export_diff(
    module: torch.nn.Module,
    samples: Sequence[dict[str, np.ndarray]],
    *,
    onnx_model: onnx.ModelProto | None = None,
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
) -> ExportDiffResult:
    """Compare ``module`` (torch eager, the reference) with its ONNX export in ONNX Runtime, module by module.

    ``samples`` are dicts of named input arrays, fed to ``forward`` positionally in
    dict order. ``onnx_model`` compares an existing ONNX model instead of exporting.
    ``deployed`` backends (e.g. Triton) are compared on the final outputs. Batch checks
    draw their rows from ``batch_pool`` (default: ``samples``).
    """
    if not samples:
        raise UsageError("export-diff needs at least one input sample")
    check_batchable(batch_pool or samples, batch_sizes)
    progress = progress or NullProgress()
    policy = tolerances or TolerancePolicy(precision=precision)
    timings: dict[str, float] = {}
    was_training = module.training
    if not keep_train_mode:
        module.eval()

    if onnx_model is None:
        _check_model_accepts(module, samples[0])  # before exporting: bad inputs are exit 2, not an export error
        progress.start("exporting to ONNX", None)
        exported = export_onnx(module, samples[0], exporter=exporter, opset=opset)
        progress.finish()
    else:
        exported = ExportResult(onnx_model, "file", None, 0.0)
    timings["export_s"] = exported.seconds
    reference_model = exported.model
    _check_inputs_fit(reference_model, samples[0], exported=onnx_model is None)
    test_model = to_precision(reference_model, precision)

    index = index_graph(reference_model)
    module_paths = [path for path, _ in module.named_modules() if path]
    mappings = map_modules(reference_model, module_paths, index)
    foreign = sorted({scope for scopes in index.scopes for scope in scopes} - set(module_paths))
    output_names = list(index.graph_outputs)
    torch_backend = TorchBackend(module, list(samples[0]), output_names)

    start = time.perf_counter()
    run = _compare_samples(
        torch_backend, test_model, mappings, samples, deployed, policy, precision, max_intermediate_bytes, progress
    )
    timings["compare_s"] = time.perf_counter() - start
    timings["ort_runs_per_sample"] = run.groups
    accumulators, output_stats, input_records = run.accumulators, run.output_stats, run.input_records
    layers = _layer_results(module, module_paths, mappings, run.skeleton, accumulators)
    outputs = tuple(
        OutputResult(
            name=name,
            backend=backend_name,
            status=PASS if all(st.passed for _, st in runs) else FAIL,
            stats=_worst(runs)[1],
            worst_sample=_worst(runs)[0],
            failing_samples=tuple(s for s, st in runs if not st.passed),
        )
        for (backend_name, name), runs in output_stats.items()
    )
    test_index = index if test_model is reference_model else index_graph(test_model)
    # An ONNX graph naming modules the torch model lacks was exported from another model: attributing
    # its differences to this model's modules and source lines would mislead, so no localization then.
    first_divergence = None if foreign else _first_divergence(
        layers, mappings, test_index, test_model, torch_backend, samples, policy
    )
    batch_checks = ()
    if batch_sizes:
        progress.start("checking batch sizes", len(batch_sizes))
        plain_ort = run.session or OnnxRuntimeBackend(test_model)
        batch_checks = tuple(check_batches(torch_backend, plain_ort, batch_pool or samples, batch_sizes, policy, progress))
        progress.finish()
    findings = build_findings(
        layers=layers,
        outputs=outputs,
        first_divergence=first_divergence,
        batch_checks=batch_checks,
        exported=exported,
        was_training=was_training,
        kept_train_mode=keep_train_mode,
        module=module,
        precision=precision,
        overflow={p: acc.overflow_samples for p, acc in accumulators.items() if acc.overflow_samples},
        layer_order=[layer.module for layer in layers],
        num_samples=len(samples),
        reference_backend=ORT_NAME,
        foreign_scopes=foreign,
        nonfinite_outputs=sorted(run.nonfinite_reference),
    )
    return ExportDiffResult(
        findings=tuple(findings),
        layers=layers,
        outputs=outputs,
        first_divergence=first_divergence,
        inputs=tuple(input_records),
        exporter=exported.exporter,
        fallback_reason=exported.fallback_reason,
        precision=precision,
        num_samples=len(samples),
        batch_checks=batch_checks,
        timings=timings,
        onnx_model=exported.model,
    )


def _worst(runs: list[tuple[int, ErrorStats]]) -> tuple[int | None, ErrorStats | None]:
    if not runs:
        return None, None
    return max(runs, key=lambda r: (not r[1].passed, r[1].shape_mismatch, r[1].nonfinite_mismatch, r[1].error_ratio))


def _layer_results(module, module_paths, mappings: dict[str, ModuleMapping], first: CaptureResult, accumulators) -> tuple[LayerResult, ...]:
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


def _first_divergence(layers, mappings, index: GraphIndex, test_model, torch_backend: TorchBackend, samples, policy) -> FirstDivergence | None:
    failing = [layer for layer in layers if layer.status == FAIL]
    if not failing:
        return None
    layer = failing[0]
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
    _, external = module_boundary(index, layer.module)
    wanted = [n for n in dict.fromkeys(external + [mappings[layer.module].value]) if n not in feeds]
    ort_values = OnnxRuntimeBackend(test_model, extra_outputs=wanted).infer(feeds, wanted) if wanted else {}
    ort_values.update({name: feeds[name] for name in feeds})
    captured = capture.modules[layer.module]
    result = localize(
        test_model,
        index,
        layer.module,
        mappings[layer.module].value,
        captured.output,
        {k: v for k, v in torch_values.items() if k != mappings[layer.module].value},
        ort_values,
        captured.inputs,
        policy.for_name(layer.module, captured.output.dtype),
    )
    output_max = layer.stats.max_abs if layer.stats else float("nan")
    input_max = result.input_max_abs
    source = layer.source
    note = result.note
    if result.cause == "inherited" and result.culprit_value:
        note += f"; the diverging input is ONNX value {result.culprit_value!r}"
        if result.culprit_source:
            source = result.culprit_source
            note += f" computed at {result.culprit_source}"
    return FirstDivergence(
        module=layer.module,
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
