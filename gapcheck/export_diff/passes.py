"""The per-sample comparison passes of export-diff: one torch forward with hooks and one ONNX Runtime run per sample.

The mapped values are marked as extra graph outputs, split into a few runs only when they would exceed
``max_intermediate_bytes``. The float64 noise floor of each compared tensor is measured on the first sample.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from gapcheck.backends.base import Backend
from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import CaptureResult, TorchBackend
from gapcheck.compare import ErrorStats, TolerancePolicy, compare_arrays
from gapcheck.errors import BackendError, InputError
from gapcheck.export_diff.result import InputRecord
from gapcheck.model.mapping import ModuleMapping
from gapcheck.model.precision import FP16_MAX
from gapcheck.progress import ProgressReporter

ORT_NAME = "onnxruntime"


@dataclass
class LayerAccumulator:
    """Per-module comparisons over samples (mutable while running, frozen into LayerResult at the end)."""

    stats: list[tuple[int, ErrorStats]] = field(default_factory=list)
    overflow_samples: list[int] = field(default_factory=list)
    note: str = ""


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
class SampleRun:
    """What the per-sample loop measured (mutable while it runs)."""

    skeleton: CaptureResult  # execution order, call counts and output counts; arrays dropped
    accumulators: dict[str, LayerAccumulator]
    output_stats: dict[tuple[str, str], list[tuple[int, ErrorStats]]] = field(default_factory=dict)
    input_records: list[InputRecord] = field(default_factory=list)
    groups: int = 1
    nonfinite_reference: set[str] = field(default_factory=set)  # torch outputs holding NaN/Inf
    session: OnnxRuntimeBackend | None = None  # the single session, kept when one group holds every marked value
    noise: dict[str, float] = field(default_factory=dict)  # max |fp32 - fp64| of torch's own result, sample 0


def compare_samples(
    torch_backend: TorchBackend,
    test_model: onnx.ModelProto,
    mappings: dict[str, ModuleMapping],
    samples: Sequence[dict[str, np.ndarray]],
    deployed: Sequence[Backend],
    policy: TolerancePolicy,
    precision: str,
    max_intermediate_bytes: int,
    progress: ProgressReporter,
    compared_outputs: Sequence[str] = (),
) -> SampleRun:
    """Per sample: one torch forward with hooks and one ORT run with the mapped values marked as outputs.

    When the marked values of one sample exceed ``max_intermediate_bytes``, they are split into groups;
    groups run one after another (outer loop), each with its own session, and each group's values are
    compared and dropped before the next, so memory stays near one group's worth.
    ``mappings`` is updated in place when a folded Conv+BatchNorm needs remapping. ``compared_outputs`` are the
    model outputs the ONNX graph has (default: all of torch's).
    """
    module_paths = list(mappings)
    submodules = dict(torch_backend.module.named_modules())
    unmapped_bn = [p for p, m in mappings.items() if not m.mapped and isinstance(submodules[p], _BatchNorm)]
    output_names = list(compared_outputs or torch_backend.output_names)
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
    run = SampleRun(skeleton=first.without_arrays(), accumulators={p: LayerAccumulator() for p in module_paths},
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
                _compare_outputs(run, capture, values, session.last_input_fingerprints, feeds, s, deployed, policy,
                                 output_names)
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
            moved[previous] = ModuleMapping(previous, None, (), (), None, scope=path)  # scope: where it went
    return moved


def _compare_layer(acc: LayerAccumulator, capture: CaptureResult, path: str, value: str, values, s: int,
                   policy: TolerancePolicy, precision: str, noise: float | None = None) -> None:
    captured = capture.modules.get(path)
    if captured is None or captured.output is None or value not in values:
        return
    reference, actual = captured.output, values[value]
    if actual.shape != reference.shape and actual.size == reference.size and \
            tuple(d for d in actual.shape if d != 1) == tuple(d for d in reference.shape if d != 1):
        actual = actual.reshape(reference.shape)  # a Gemm on the flattened batch: (17, 576) for torch's (1, 17, 576)
    if actual.shape != reference.shape:
        acc.note = f"ONNX value {value} has shape {actual.shape}, torch {reference.shape}"
        return
    stats = compare_arrays(actual, reference, policy.for_name(path, reference.dtype, noise))
    acc.stats.append((s, stats))
    if precision == "fp16" and (stats.nonfinite_mismatch or stats.expected_absmax > FP16_MAX):
        acc.overflow_samples.append(s)


def _compare_outputs(run: SampleRun, capture: CaptureResult, ort_values, ort_fed: dict[str, str], feeds, s: int,
                     deployed, policy, compared: Sequence[str]) -> None:
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
        for name in compared:
            actual = values.get(name)
            if actual is None:
                raise BackendError(f"{backend_name} returned no output named {name!r} (it returned {sorted(values)})")
            reference = capture.outputs[name]
            if np.issubdtype(reference.dtype, np.floating) and not np.isfinite(reference).all():
                run.nonfinite_reference.add(name)
            stats = compare_arrays(actual, reference, policy.for_name(name, reference.dtype, run.noise.get(name)))
            run.output_stats.setdefault((backend_name, name), []).append((s, stats))
