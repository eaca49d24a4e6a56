"""export-diff: torch eager vs ONNX Runtime (and deployed backends), layer by layer, over several inputs.

One torch forward with hooks and one ONNX Runtime run with the mapped values marked
as extra outputs per sample (split into a few runs only when the marked values
would exceed ``max_intermediate_bytes``).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from gapcheck.backends.base import Backend
from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import CaptureResult, TorchBackend, hookable
from gapcheck.codes.export_diff import (
    ATTRIBUTION_FALLBACK,
    ONNX_MODEL_MISMATCH,
    OUTPUTS_NOT_IN_FILE,
    UNOBSERVABLE_MODULES,
)
from gapcheck.compare import DEFAULT_TOLERANCES, NOISE_FACTOR, ErrorStats, TolerancePolicy
from gapcheck.errors import BackendError, ExportError, InputError, UsageError
from gapcheck.export_diff.align import Realignment, realign
from gapcheck.export_diff.align import apply as apply_realignment
from gapcheck.export_diff.batch import check_batchable, check_batches
from gapcheck.export_diff.findings import build_findings
from gapcheck.export_diff.localize import first_divergence as locate_first_divergence
from gapcheck.export_diff.localize import module_source
from gapcheck.export_diff.passes import ORT_NAME, SampleRun, compare_samples
from gapcheck.export_diff.result import (
    FAIL,
    NO_ONNX,
    NOT_COMPARABLE,
    PASS,
    ExportDiffResult,
    LayerResult,
    OutputResult,
)
from gapcheck.findings import Finding, Subject
from gapcheck.groups.export import ExportSpec, output_names, refused
from gapcheck.model.export import ExportResult
from gapcheck.model.fit import ModelFit, attribute_by_weights, check_fit
from gapcheck.model.mapping import GraphIndex, ModuleMapping, index_graph, map_modules
from gapcheck.model.onnx_file import computes_in_fp16
from gapcheck.model.precision import to_precision
from gapcheck.progress import NullProgress, ProgressReporter

log = logging.getLogger(__name__)
DEFAULT_MAX_INTERMEDIATE_BYTES = 1 << 30


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
                    f"input {value_info.name!r} has shape {tuple(array.shape)}; "
                    f"the ONNX graph expects dim {axis} = {dim.dim_value}"
                )


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


@dataclass(frozen=True)
class ExportOptions:
    """How the ONNX side is obtained when no file is given: an export already made (``exported``, e.g. the one the
    deployment audit made), or one made now by :meth:`ExportSpec.obtain <gapcheck.groups.export.ExportSpec.obtain>`
    (the one export path, cache and run-once input check) with this exporter and opset, through ``cache`` (an
    :class:`~gapcheck.model.cache.ExportCache`), ``sequence_inputs`` exported with a dynamic sequence axis (for the
    padding check)."""

    exporter: str = "dynamo"
    opset: int | None = None
    cache: Any = None
    sequence_inputs: tuple[str, ...] = ()
    exported: ExportResult | None = None


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
    compared_outputs: tuple[str, ...] = ()  # the model outputs the ONNX graph has (all of them, usually)
    precision: str = "fp32"
    fp16_file: bool = False  # the file computes in FP16 and runs as written (whatever budgets were asked)

    @property
    def test_index(self) -> GraphIndex:
        """The index of the graph that runs (the FP16 copy has its own value names)."""
        return self.index if self.test_model is self.exported.model else index_graph(self.test_model, self.module_paths)


def export_diff(
    module: torch.nn.Module,
    samples: Sequence[dict[str, np.ndarray]],
    *,
    onnx_model: onnx.ModelProto | None = None,
    export: ExportOptions = ExportOptions(),
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
    dict order. ``onnx_model`` compares an existing ONNX model instead of exporting; ``export`` says how the
    export is made (or hands one already made: :class:`ExportOptions`).
    ``deployed`` backends (e.g. Triton) are compared on the final outputs. Batch checks
    draw their rows from ``batch_pool`` (default: ``samples``).
    The model is compared in eval mode (unless ``keep_train_mode``) and handed back as it came.
    """
    if not samples:
        raise UsageError("export-diff needs at least one input sample")
    check_batchable(batch_pool or samples, batch_sizes)
    progress = progress or NullProgress()
    policy = tolerances or TolerancePolicy(precision=precision)
    with evaluation_mode(module, keep_train_mode) as was_training:
        first = None
        exported = export.exported
        if onnx_model is None and exported is None:
            exported, torch_names = ExportSpec(exporter=export.exporter, opset=export.opset).obtain(
                module, samples[0], cache=export.cache, progress=progress, sequence_inputs=export.sequence_inputs)
            plan = _plan(module, exported, samples[0], torch_names, precision, from_file=False)
        else:  # a file, or the export made for the deployment audit
            exported = exported if onnx_model is None else ExportResult(onnx_model, "file", None, 0.0)
            plan, first = _plan_with_first_run(module, exported, samples[0], precision, from_file=onnx_model is not None)
        torch_backend = TorchBackend(module, list(samples[0]), plan.output_names)
        compared = _compare(torch_backend, plan, samples, deployed, policy, max_intermediate_bytes, progress, first)
        checks = _Checks(tuple(batch_sizes), batch_pool or samples, was_training, keep_train_mode)
        return _assemble(module, plan, compared, torch_backend, samples, policy, checks, progress)


@dataclass(frozen=True)
class _Compared:
    """The per-sample comparison and the value re-check of what failed under its name, with their times."""

    run: SampleRun
    realigned: Realignment
    compare_s: float
    realign_s: float


@dataclass(frozen=True)
class _Checks:
    """What the result reports beside the comparison: batch sizes to check (rows from ``pool``) and the mode."""

    batch_sizes: tuple[int, ...]
    pool: Sequence[dict[str, np.ndarray]]
    was_training: bool
    keep_train_mode: bool


def _compare(torch_backend: TorchBackend, plan: _Plan, samples, deployed: Sequence[Backend], policy: TolerancePolicy,
             max_intermediate_bytes: int, progress: ProgressReporter, first: CaptureResult | None) -> _Compared:
    start = time.perf_counter()
    run = compare_samples(torch_backend, plan.test_model, plan.mappings, samples, deployed, policy, plan.precision,
                          max_intermediate_bytes, progress, compared_outputs=plan.compared_outputs, first=first)
    realign_start = time.perf_counter()
    realigned = _realign(torch_backend, plan, run, samples, policy)
    realign_s = time.perf_counter() - realign_start  # value confirmation: ~0 when every module passes
    return _Compared(run, realigned, time.perf_counter() - start, realign_s)


def _realign(torch_backend, plan: _Plan, run: SampleRun, samples, policy) -> Realignment:
    """Re-check by value the modules that fail under their name mapping (only then: a passing run does none of it)."""
    if (plan.fp16_file and plan.precision == "fp32") or not plan.fit.fits or torch_backend.module.training:
        # an FP16 file judged with FP32 budgets (asked: every module of it fails them, so no value could confirm a
        # match), another model's graph, batch statistics: names are all there is. An FP16 file or --precision fp16
        # is re-checked under the run's FP16 budgets: a Conv with its BatchNorm folded in is compared as the group
        return Realignment()
    failing_outputs = {name for (backend, name), runs in run.output_stats.items() if backend == ORT_NAME
                       and any(not st.passed for _, st in runs)}
    realigned = realign(torch_backend, plan.test_model, plan.test_index, plan.mappings, run.accumulators, samples,
                        policy, run.noise, failing_outputs)
    apply_realignment(realigned, plan.mappings, run.accumulators)
    return realigned


def _index(module, model: onnx.ModelProto) -> tuple[list[str], GraphIndex, dict[str, ModuleMapping]]:
    """The model's module paths, the graph indexed against them, and each module's value by name."""
    module_paths = [path for path, _ in module.named_modules() if path]
    index = index_graph(model, module_paths)
    return module_paths, index, map_modules(model, module_paths, index)


def _plan_with_first_run(module, exported: ExportResult, sample, precision: str,
                         from_file: bool) -> tuple[_Plan, CaptureResult]:
    """The plan for a graph made already, with the first sample's capture: the one run of the model that both checks
    that it accepts the inputs (exit 2 otherwise, as before any other check) and names its outputs, which the
    comparison then reuses instead of running the model again on that sample."""
    module_paths, index, mappings = _index(module, exported.model)
    submodules = dict(module.named_modules())
    if from_file and not index.has_scopes:  # modules may be attributed by their weights: any of them may be compared
        wanted = [p for p in module_paths if hookable(submodules[p])]
    else:  # what the comparison captures: mapped modules, and BatchNorms a TorchScript export folded
        wanted = [p for p, m in mappings.items() if m.mapped or isinstance(submodules[p], _BatchNorm)]
    try:
        first = TorchBackend(module, list(sample), []).capture(sample, modules=wanted, order_of=module_paths)
    except BackendError as exc:
        raise refused(sample, exc.__cause__ or exc, exported.model if from_file else None) from exc
    if not first.outputs:
        output_names(module, sample)  # raises the usage error that says what the model returns
        raise UsageError("the model returns no tensor: nothing to compare")
    plan = _plan(module, exported, sample, list(first.outputs), precision, from_file, (module_paths, index, mappings))
    outputs = dict(zip(plan.output_names, first.outputs.values(), strict=True))  # named as the comparison names them
    return plan, dataclasses.replace(first, outputs=outputs)


def _plan(module, exported: ExportResult, sample, torch_names: list[str], precision: str, from_file: bool,
          indexed: tuple[list[str], GraphIndex, dict[str, ModuleMapping]] | None = None) -> _Plan:
    """Index the graph against the model's module paths (unless ``indexed`` by :func:`_index`), map modules to
    values, and check a foreign file's fit."""
    reference_model = exported.model
    _check_inputs_fit(reference_model, sample, exported=not from_file)
    module_paths, index, mappings = indexed or _index(module, reference_model)
    onnx_outputs = list(index.graph_outputs)
    subset = bool(onnx_outputs) and len(onnx_outputs) < len(torch_names) and set(onnx_outputs) <= set(torch_names)
    fit = check_fit(reference_model, module, len(onnx_outputs) if subset else len(torch_names),
                    index.unknown_scopes) if from_file else ModelFit()
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
    output_names, compared = _output_names(onnx_outputs, torch_names, fit)
    if len(compared) < len(output_names):
        lacking = [name for name in output_names if name not in compared]
        notes.append(OUTPUTS_NOT_IN_FILE.finding(
            f"the ONNX file has {len(compared)} of the model's {len(output_names)} outputs: "
            f"{', '.join(lacking)} {'is' if len(lacking) == 1 else 'are'} not in it and not compared",
            where="onnx", subject=Subject(other="onnx"), evidence={"not_in_file": lacking, "compared": list(compared)}))
    # A file already in FP16 (converted for deployment) runs as it is, whatever budgets were asked: converting it
    # again would refuse it, and FP32 budgets on it (--precision fp32) judge the file as written
    fp16_file = computes_in_fp16(reference_model)
    test_model = reference_model if fp16_file else to_precision(reference_model, precision)
    return _Plan(exported, test_model, index, module_paths, mappings, output_names, fit, tuple(notes), compared,
                 precision, fp16_file)


def _output_names(onnx_outputs: list[str], torch_names: list[str], fit: ModelFit) -> tuple[list[str], tuple[str, ...]]:
    """The torch side's names for the model's outputs (positional), and the outputs the ONNX graph has to compare.

    A file that keeps only some of the model's outputs under the model's names (Optimum's BertModel export has
    last_hidden_state, not pooler_output) is compared on those; the torch side still computes all of them, once.
    """
    if len(onnx_outputs) == len(torch_names):
        return onnx_outputs, tuple(onnx_outputs)
    if onnx_outputs and set(onnx_outputs) <= set(torch_names):
        return torch_names, tuple(onnx_outputs)
    return torch_names, tuple(torch_names)  # another model: the onnx_model_mismatch finding says so


def _assemble(module, plan: _Plan, compared: _Compared, torch_backend: TorchBackend, samples,
              policy: TolerancePolicy, checks: _Checks, progress: ProgressReporter) -> ExportDiffResult:
    """Layer and output records, the first divergence, batch checks and findings, as one result."""
    run, realigned = compared.run, compared.realigned
    layers = _layer_results(module, plan.module_paths, plan.mappings, run.skeleton, run.accumulators, run.noise)
    outputs = _output_results(run)
    # An ONNX graph of another model: attributing its differences to this model's modules would mislead.
    first_divergence = None if not plan.fit.fits else locate_first_divergence(
        layers, plan.mappings, plan.test_index, plan.test_model, torch_backend, samples, policy, run.noise,
        realigned.groups)
    if torch_backend.noise_note and layers:  # why the budgets are the dtype defaults: said on the first layer
        first = layers[0]
        layers = (dataclasses.replace(first, note=(first.note + "; " if first.note else "") + torch_backend.noise_note),
                  *layers[1:])
    batch_checks = _batch_checks(torch_backend, plan, run, policy, checks, progress)
    findings = _findings(module, plan, run, layers, outputs, first_divergence, batch_checks, checks, len(samples))
    return ExportDiffResult(
        findings=tuple(findings),
        layers=layers,
        outputs=outputs,
        first_divergence=first_divergence,
        inputs=tuple(run.input_records),
        exporter=plan.exported.exporter,
        fallback_reason=plan.exported.fallback_reason,
        precision=plan.precision,
        num_samples=len(samples),
        batch_checks=batch_checks,
        timings={"export_s": plan.exported.seconds, "compare_s": compared.compare_s,
                 "ort_runs_per_sample": run.groups, "realign_s": compared.realign_s},
        onnx_model=plan.exported.model,
        model_outputs=tuple(plan.output_names),
    )


def _output_results(run: SampleRun) -> tuple[OutputResult, ...]:
    """Each backend's graph outputs vs torch, worst sample first."""
    results = []
    for (backend_name, name), runs in run.output_stats.items():
        worst_sample, stats = _worst(runs)
        results.append(OutputResult(
            name=name,
            backend=backend_name,
            status=PASS if all(st.passed for _, st in runs) else FAIL,
            stats=stats,
            worst_sample=worst_sample,
            failing_samples=tuple(s for s, st in runs if not st.passed),
            note=_noise_note(run.noise.get(name)),
        ))
    return tuple(results)


def _batch_checks(torch_backend: TorchBackend, plan: _Plan, run: SampleRun, policy: TolerancePolicy,
                  checks: _Checks, progress: ProgressReporter) -> tuple:
    if not checks.batch_sizes:
        return ()
    progress.start("checking batch sizes", len(checks.batch_sizes))
    plain_ort = run.session or OnnxRuntimeBackend(plan.test_model)
    found = tuple(check_batches(torch_backend, plain_ort, checks.pool, checks.batch_sizes, policy, progress,
                                plan.compared_outputs))
    progress.finish()
    return found


def _findings(module, plan: _Plan, run: SampleRun, layers, outputs, first_divergence, batch_checks, checks: _Checks,
              num_samples: int) -> list[Finding]:
    """The plan's notes, a foreign ONNX graph, and what the comparison found."""
    findings = list(plan.notes)
    if not plan.fit.fits:
        findings.append(ONNX_MODEL_MISMATCH.finding(
            f"the ONNX graph does not fit this model: {'; '.join(plan.fit.evidence)}; differences are not attributed",
            where="onnx", subject=Subject(other="onnx"), evidence=plan.fit.details))
    return findings + build_findings(
        layers=layers,
        outputs=outputs,
        first_divergence=first_divergence,
        batch_checks=batch_checks,
        exported=plan.exported,
        was_training=checks.was_training,
        kept_train_mode=checks.keep_train_mode,
        module=module,
        precision=plan.precision,
        overflow={p: acc.overflow_samples for p, acc in run.accumulators.items() if acc.overflow_samples},
        layer_order=[layer.module for layer in layers],
        num_samples=num_samples,
        reference_backend=ORT_NAME,
        nonfinite_outputs=sorted(run.nonfinite_reference),
    )


def _noise_note(noise: float | None) -> str:
    """How the layer's budget was set, when the float64 noise floor widened it."""
    widened = noise is not None and NOISE_FACTOR * noise > DEFAULT_TOLERANCES["float32"][1]
    return f"budget atol {NOISE_FACTOR:g} x fp32 noise floor {noise:.2g}" if widened else ""


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
        if not mapping.mapped and mapping.scope:
            status, note = NO_ONNX, note or f"folded into {mapping.scope}'s ONNX op; compared there"
        elif not mapping.mapped:
            status, note = NO_ONNX, note or "no ONNX counterpart (fused into a neighbour, identity, or not executed)"
        elif mapping.how == "unmatched":
            status = NOT_COMPARABLE
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
                noise_floor=noise.get(path),
            )
        )
    return tuple(rows)


