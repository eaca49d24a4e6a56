"""The per-sample comparison passes of export-diff: one torch forward with hooks and one ONNX Runtime run per sample.

The mapped values are marked as extra graph outputs, split into a few runs only when they would exceed
``max_intermediate_bytes``. The float64 noise floor of each compared tensor is measured on the first sample, when
some verdict could depend on it (:func:`noise_can_matter`).
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from gapcheck.backends.base import Backend
from gapcheck.backends.onnxruntime import OnnxRuntimeBackend
from gapcheck.backends.torch_eager import CaptureResult, TorchBackend
from gapcheck.compare import NOISE_CEILING_REL, ErrorStats, TolerancePolicy, compare_arrays
from gapcheck.errors import BackendError, InputError
from gapcheck.export_diff.result import InputRecord
from gapcheck.model.mapping import ModuleMapping
from gapcheck.model.precision import FP16_MAX
from gapcheck.progress import ProgressReporter

ORT_NAME = "onnxruntime"
log = logging.getLogger(__name__)


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
    noise: str = "auto",
    first: CaptureResult | None = None,
) -> SampleRun:
    """Per sample: one torch forward with hooks and one ORT run with the mapped values marked as outputs.

    When the marked values of one sample exceed ``max_intermediate_bytes``, they are split into groups;
    groups run one after another (outer loop), each with its own session, and each group's values are
    compared and dropped before the next, so memory stays near one group's worth.
    ``mappings`` is updated in place when a folded Conv+BatchNorm needs remapping. ``compared_outputs`` are the
    model outputs the ONNX graph has (default: all of torch's). ``first`` is the first sample's capture when the
    caller made it already (outputs of every mapped module and BatchNorm, the order of all; outputs named as
    ``torch_backend`` names them): the model is not run on it again.

    ``noise`` says when the float64 noise floor is measured (fp32 only): "always" on every group's first sample,
    as the tolerances define it; "auto" (default) only when some verdict could depend on it (see
    :func:`noise_can_matter`). No verdict differs between the two: a run where every tensor passes the dtype's
    default budget with an error under ``NOISE_CEILING_REL`` x its largest value passes under any noise floor, so
    it skips the float64 forward (its ``noise`` stays empty); any other run measures it for every tensor, as
    "always" does: in place when the first sample shows it, else by running again.
    """
    if noise not in ("auto", "always"):
        raise ValueError(f"noise must be 'auto' or 'always', not {noise!r}")
    setup = _setup(torch_backend, test_model, mappings, samples, deployed, policy, precision, max_intermediate_bytes,
                   compared_outputs, first)
    if precision != "fp32":
        return _run(setup, progress, "never")
    if noise == "auto":
        try:
            return _run(setup, progress, "lazy")
        except _NoiseNeeded as needed:
            log.debug("measuring the float64 noise floor after all: %s", needed)
    return _run(setup, progress, "always")


class _NoiseNeeded(Exception):
    """A verdict could depend on the noise floor, found after the first sample: the run starts again, measuring it."""


@dataclass
class _Setup:
    """What every pass over the samples shares (built once, even when the run starts again)."""

    torch_backend: TorchBackend
    test_model: onnx.ModelProto
    mappings: dict[str, ModuleMapping]
    samples: Sequence[dict[str, np.ndarray]]
    deployed: Sequence[Backend]
    policy: TolerancePolicy
    precision: str
    output_names: list[str]
    groups: list[list[str]]
    skeleton: CaptureResult
    first: CaptureResult | None  # sample 0's capture of every mapped module, when one group holds them all
    fed_by: dict[str, str] = field(default_factory=dict)  # FP16 budgets: an activation's value -> the value it reads


def _setup(torch_backend: TorchBackend, test_model, mappings, samples, deployed, policy, precision,
           max_intermediate_bytes: int, compared_outputs: Sequence[str], first: CaptureResult | None) -> _Setup:
    """The first sample's capture (execution order, folded BatchNorms remapped) and the marked values' groups."""
    module_paths = list(mappings)
    submodules = dict(torch_backend.module.named_modules())
    if first is None:
        unmapped_bn = [p for p, m in mappings.items() if not m.mapped and isinstance(submodules[p], _BatchNorm)]
        try:
            first = torch_backend.capture(
                samples[0], modules=[p for p, m in mappings.items() if m.mapped] + unmapped_bn, order_of=module_paths
            )
        except BackendError as exc:  # torch itself refuses these inputs: an input error, not a backend failure
            raise InputError(f"the model does not accept the given inputs: {exc.message}") from exc
    mappings.update(_move_folded_batchnorms(mappings, first, submodules))
    sizes = {mappings[p].value: c.output.nbytes for p, c in first.modules.items() if c.output is not None and mappings[p].mapped}
    groups = _chunks(list(sizes), sizes, max_intermediate_bytes) or [[]]
    fed_by = _activation_inputs(test_model, set(sizes)) if policy.precision != "fp32" else {}
    # the values those activations read are fetched with them (a BatchNormalization's output no module is named at)
    groups = [group + [v for v in dict.fromkeys(fed_by[a] for a in group if a in fed_by) if v not in group]
              for group in groups]
    return _Setup(torch_backend, test_model, mappings, samples, deployed, policy, precision,
                  list(compared_outputs or torch_backend.output_names), groups, first.without_arrays(),
                  # several groups: recaptured per group, as holding every module's output would defeat the budget
                  first if len(groups) == 1 else None, fed_by)


#: Activations that pass an error on no larger than it came (slope at most 1): under FP16 budgets their output is
#: allowed the error their input is allowed.
_NON_EXPANDING = frozenset({"Clip", "Relu", "LeakyRelu", "Tanh", "Sigmoid", "HardSigmoid"})


def _activation_inputs(model: onnx.ModelProto, marked: set[str]) -> dict[str, str]:
    """Each marked value an activation of :data:`_NON_EXPANDING` computes: the value it reads.

    An FP16 budget scales with the tensor's own range (atol x max|reference|), so a ReLU6, whose range is clipped to
    6, was allowed 0.12 where its Conv+BatchNorm input, ranging to 24, is allowed 0.48: the ReLU6 failed with the
    very error its passing input carried (timm mobilenetv2_100 in FP16: a false layer_divergence, exit 1).
    """
    computed = {name for node in model.graph.node for name in node.output}  # not a graph input: fetched as an output
    return {node.output[0]: node.input[0] for node in model.graph.node
            if node.op_type in _NON_EXPANDING and node.output and node.output[0] in marked and node.input
            and node.input[0] in computed}


def _run(setup: _Setup, progress: ProgressReporter, noise: str) -> SampleRun:
    """One pass over groups and samples. ``noise``: "always", "never", or "lazy" (see :func:`compare_samples`;
    raises :class:`_NoiseNeeded` when a verdict could depend on the noise floor after the first sample)."""
    mappings, samples, backend = setup.mappings, setup.samples, setup.torch_backend
    run = SampleRun(skeleton=setup.skeleton, accumulators={p: LayerAccumulator() for p in mappings},
                    groups=len(setup.groups))
    mapped_paths = [p for p, m in mappings.items() if m.mapped]
    progress.start(f"comparing {len(mapped_paths)} modules", len(samples) * len(setup.groups))
    for g, group in enumerate(setup.groups):
        session = OnnxRuntimeBackend(setup.test_model, extra_outputs=group, name=ORT_NAME)
        in_group = set(group)
        group_paths = [p for p in mapped_paths if mappings[p].value in in_group]
        for s, feeds in enumerate(samples):
            capture = setup.first if s == 0 and setup.first is not None else backend.capture(feeds, modules=group_paths)
            if s == 0 and noise == "always":  # once per group, on the first sample: the rounding noise of each tensor
                run.noise.update(backend.noise_floor(feeds, capture, group_paths))
            values = session.infer(feeds, (setup.output_names if g == 0 else []) + group)
            served = None  # the first group compares the model's outputs: ORT's and every deployed backend's
            if g == 0:
                served = [(ORT_NAME, values), *_record_inputs(run, capture, session.last_input_fingerprints, feeds, s,
                                                              setup.deployed)]
            compared = _compare_sample(setup, run, capture, values, served, group_paths, s)
            if noise == "lazy" and any(noise_can_matter(setup.policy, *c) for c in compared):
                if g or s:
                    raise _NoiseNeeded(f"group {g}, sample {s}")
                noise = "always"  # the first sample shows it: measure now and compare this sample again
                _drop_sample(run, 0)
                run.noise.update(backend.noise_floor(feeds, capture, group_paths))
                _compare_sample(setup, run, capture, values, served, group_paths, s)
            progress.advance()
        if len(setup.groups) == 1:
            run.session = session
    progress.finish()
    return run


def noise_can_matter(policy: TolerancePolicy, name: str, dtype: np.dtype, stats: ErrorStats) -> bool:
    """Whether the noise floor could change this comparison's verdict, or what the run does after it.

    ``stats`` were measured without a noise floor: atol is the dtype default, no ceiling. With a floor n, the budget
    of every element grows (atol = max(default, NOISE_FACTOR n)) and a ceiling max(NOISE_CEILING_FACTOR n,
    NOISE_CEILING_REL max|expected|) caps it. So a tensor that passes with an error under NOISE_CEILING_REL x its
    largest |value| passes under every floor. A failing one always counts: a floor could widen it into a pass, and
    even when none can (a shape or NaN mismatch, an exact integer), the value re-check and the localization that
    follow a failure compare other tensors with noise-aware budgets.
    """
    if not stats.passed:
        return True
    if policy.for_name(name, dtype, 1.0).noise_ceiling is None:
        return False  # an override, an explicit atol, an integer tensor: the floor is not used for it
    return not stats.max_abs <= NOISE_CEILING_REL * stats.expected_absmax


def _compare_sample(setup: _Setup, run: SampleRun, capture: CaptureResult, values, served, group_paths: list[str],
                    s: int) -> list[tuple[str, np.dtype, ErrorStats]]:
    """This sample's layer comparisons (and, in the first group, its output comparisons), added to ``run``."""
    compared = []
    for path in group_paths:
        value = setup.mappings[path].value
        fed = values.get(setup.fed_by.get(value, ""))
        stats = _compare_layer(run.accumulators[path], capture, path, value, values, s,
                               setup.policy, setup.precision, run.noise.get(path),
                               float(np.max(np.abs(fed))) if fed is not None and fed.size else None)
        if stats is not None:
            compared.append((path, capture.modules[path].output.dtype, stats))
    if served is not None:
        not_served = {b.name: frozenset(getattr(b, "not_served", ())) for b in setup.deployed}
        compared += _compare_outputs(run, capture, served, s, setup.policy, setup.output_names, not_served)
    return compared


def _drop_sample(run: SampleRun, s: int) -> None:
    """Forget sample ``s``'s comparisons (kept: its input records, which no budget changes)."""
    for acc in run.accumulators.values():
        acc.stats = [(i, st) for i, st in acc.stats if i != s]
        acc.overflow_samples = [i for i in acc.overflow_samples if i != s]
    for key, runs in run.output_stats.items():
        run.output_stats[key] = [(i, st) for i, st in runs if i != s]
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
                   policy: TolerancePolicy, precision: str, noise: float | None = None,
                   input_absmax: float | None = None) -> ErrorStats | None:
    """One module's output on sample ``s``; ``input_absmax``: the range of the value a non-expanding activation
    reads (FP16 budgets: the activation is allowed the error its input is allowed, see :func:`_activation_inputs`)."""
    captured = capture.modules.get(path)
    if captured is None or captured.output is None or value not in values:
        return None
    reference, actual = captured.output, values[value]
    if actual.shape != reference.shape and actual.size == reference.size and \
            tuple(d for d in actual.shape if d != 1) == tuple(d for d in reference.shape if d != 1):
        actual = actual.reshape(reference.shape)  # a Gemm on the flattened batch: (17, 576) for torch's (1, 17, 576)
    if actual.shape != reference.shape:
        acc.note = f"ONNX value {value} has shape {actual.shape}, torch {reference.shape}"
        return None
    tol = policy.for_name(path, reference.dtype, noise)
    if input_absmax is not None and tol.scale_atol and reference.size:
        widen = max(1.0, input_absmax) / max(1.0, float(np.max(np.abs(reference))))
        tol = dataclasses.replace(tol, atol=tol.atol * max(1.0, widen))
    stats = compare_arrays(actual, reference, tol)
    acc.stats.append((s, stats))
    if precision == "fp16" and (stats.nonfinite_mismatch or stats.expected_absmax > FP16_MAX):
        acc.overflow_samples.append(s)
    return stats


def _record_inputs(run: SampleRun, capture: CaptureResult, ort_fed: dict[str, str], feeds, s: int,
                   deployed: Sequence[Backend]) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Run every deployed backend on this sample and record the input fingerprints each backend fed.

    Each backend reports the SHA256 of what it actually fed; a backend that cannot say is marked "unknown".
    Returns each deployed backend's name and outputs.
    """
    deployed_values, deployed_fed = [], {}
    for backend in deployed:
        deployed_values.append((backend.name, backend.infer(feeds)))
        deployed_fed[backend.name] = dict(getattr(backend, "last_input_fingerprints", None) or {})
    for name, array in feeds.items():
        hashes = {"torch": capture.input_fingerprints.get(name, "unknown"), ORT_NAME: ort_fed.get(name, "unknown")}
        for backend_name, fed in deployed_fed.items():
            hashes[backend_name] = fed.get(name, "unknown")
        run.input_records.append(InputRecord(s, name, tuple(array.shape), str(array.dtype), hashes))
    return deployed_values


def _compare_outputs(run: SampleRun, capture: CaptureResult, served: list[tuple[str, dict[str, np.ndarray]]], s: int,
                     policy: TolerancePolicy, compared: Sequence[str],
                     not_served: dict[str, frozenset[str]] | None = None) -> list[tuple[str, np.dtype, ErrorStats]]:
    """Graph outputs of ONNX Runtime and of every deployed backend (``served``: backend -> outputs) vs torch.

    ``not_served``: per backend, the graph outputs it reports it does not serve (a deployment exposing only some of
    them: the audit made each a gap); they are skipped, the outputs it serves compared. Any other output a backend
    fails to return is a backend failure."""
    out = []
    for backend_name, values in served:
        skipped = (not_served or {}).get(backend_name, frozenset())
        for name in compared:
            actual = values.get(name)
            if actual is None and name in skipped:
                continue
            if actual is None:
                raise BackendError(f"{backend_name} returned no output named {name!r} (it returned {sorted(values)})")
            reference = capture.outputs[name]
            if np.issubdtype(reference.dtype, np.floating) and not np.isfinite(reference).all():
                run.nonfinite_reference.add(name)
            stats = compare_arrays(actual, reference, policy.for_name(name, reference.dtype, run.noise.get(name)))
            run.output_stats.setdefault((backend_name, name), []).append((s, stats))
            out.append((name, reference.dtype, stats))
    return out
