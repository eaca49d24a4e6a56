"""The export-diff entry point a CLI or a notebook calls: load, draw inputs, audit the deployment, compare."""
from __future__ import annotations

import dataclasses
import inspect
import logging
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch

from gapcheck.codes.export_diff import CHECKPOINT_KEYS, DEPLOYMENT_NOT_COMPARED
from gapcheck.compare import Tolerance, TolerancePolicy
from gapcheck.errors import UsageError
from gapcheck.export_diff.result import ExportDiffResult
from gapcheck.export_diff.runner import (
    DEFAULT_MAX_INTERMEDIATE_BYTES,
    evaluation_mode,
    export_diff,
    obtain_onnx,
)
from gapcheck.findings import Finding, Subject
from gapcheck.inputs import (
    DEFAULT_MAX_ELEMENTS,
    SUPPORTED_DTYPES,
    InputSpec,
    load_samples_file,
    parse_input_spec,
    random_samples,
)
from gapcheck.model.export import load_onnx, save_onnx
from gapcheck.model.loading import load_model
from gapcheck.progress import NullProgress, ProgressReporter
from gapcheck.triton.client import TritonEndpoint

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class DeploymentTarget:
    """A served copy of the model to compare too: a model (version) on a Triton endpoint."""

    endpoint: TritonEndpoint
    model: str
    version: str | None = None


@dataclass(frozen=True)
class PadCheckRequest:
    """Padding invariance (see :mod:`gapcheck.export_diff.padding`); None names are found from the inputs."""

    sides: tuple[str, ...] = ("right",)
    lengths: tuple[int, ...] = ()
    token_input: str | None = None
    mask_input: str | None = None
    n_sequences: int = 4
    pad_id: int | None = None  # the token padding is filled with (None: the model's config.pad_token_id, else 0)


@dataclass(frozen=True)
class ExportDiffRequest:
    """Everything ``gapcheck export-diff`` can be asked, as one value."""

    checkpoint: Path | None = None
    factory: str | None = None
    input_specs: tuple[str, ...] = ()
    inputs_file: Path | None = None
    onnx_file: Path | None = None
    exporter: str = "dynamo"
    opset: int | None = None
    batch_sizes: tuple[int, ...] = ()
    num_samples: int = 1
    seed: int = 0
    rtol: float | None = None
    atol: float | None = None
    overrides: dict[str, tuple[float, float]] = field(default_factory=dict)
    precision: str = "fp32"
    keep_train_mode: bool = False
    unsafe_pickle: bool = False
    strict: bool = True
    max_intermediate_bytes: int = DEFAULT_MAX_INTERMEDIATE_BYTES
    deployment: DeploymentTarget | None = None
    server_layers: bool = False  # also compare layer by layer on the server, through a temporary twin
    twin_files: tuple[Path, ...] = ()  # files the twin needs besides model.onnx (e.g. a Python backend's model.py)
    save_onnx: Path | None = None
    cache_dir: Path | None = None  # export cache folder (default: gapcheck.model.cache.default_cache_dir())
    no_cache: bool = False  # always export; neither read nor write the cache
    max_input_elements: int = DEFAULT_MAX_ELEMENTS  # per drawn input: larger shapes are refused before allocating
    pad_check: PadCheckRequest | None = None  # also check padding invariance on every backend


def specs_from_onnx(model: onnx.ModelProto) -> list[InputSpec]:
    """Input specs read off an ONNX graph (dynamic axes become 1), for ``--onnx`` without ``--input``."""
    initializers = {i.name for i in model.graph.initializer}
    specs = []
    for value_info in model.graph.input:
        if value_info.name in initializers:
            continue
        tensor_type = value_info.type.tensor_type
        try:
            dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        except KeyError:
            dtype = None
        if dtype not in SUPPORTED_DTYPES:
            raise UsageError(f"cannot draw random values for ONNX input {value_info.name!r}: give --input or --inputs")
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim)
        specs.append(InputSpec(value_info.name, shape, dtype))
    return specs


def forward_input_names(module: torch.nn.Module, onnx_model: onnx.ModelProto | None) -> list[str] | None:
    """The names inputs are fed by, in order: the ONNX graph's inputs, else ``forward``'s positional parameters."""
    if onnx_model is not None:
        initializers = {i.name for i in onnx_model.graph.initializer}
        return [i.name for i in onnx_model.graph.input if i.name not in initializers]
    try:
        parameters = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):  # builtins, TorchScript modules
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        return None  # forward(*args): positions are all there is
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]


def check_input_positions(module: torch.nn.Module, names: list[str]) -> None:
    """Inputs reach ``forward`` by position: refuse names that are forward's parameters at other positions.

    ``--input input_ids:... --input attention_mask:...`` on GPT-2 would otherwise feed the mask to its second
    parameter (``past_key_values``) and fail deep inside the model, or silently compute something else.
    """
    try:
        parameters = [p for p in inspect.signature(module.forward).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):  # builtins, TorchScript modules
        return
    order = [p.name for p in parameters]
    for position, name in enumerate(names):
        if name in order and order.index(name) != position:
            shown = ", ".join(order[: max(order.index(name), position) + 1])
            raise UsageError(
                f"input {name!r} is parameter {order.index(name) + 1} of {type(module).__name__}.forward({shown}, ...) "
                f"but is given as input {position + 1}: inputs are passed to forward by position",
                hint="give the inputs in forward's order (every parameter before the last one you need), or wrap "
                     "the model in a module whose forward takes exactly these inputs")


def _sequence_inputs(request: ExportDiffRequest, sample: dict[str, np.ndarray]) -> tuple[str, ...]:
    """With --pad-check and gapcheck's own export: the inputs exported with a dynamic sequence axis (every input
    shaped like the token input, as the padding check pads them), so ONNX Runtime can run every padded length."""
    if request.pad_check is None or request.onnx_file is not None:
        return ()
    from gapcheck.export_diff.pad_run import token_and_mask

    token, _ = token_and_mask(sample, request.pad_check.token_input, request.pad_check.mask_input,
                               request.input_specs)
    length = sample[token].shape[1]
    return tuple(name for name, array in sample.items() if array.ndim >= 2 and array.shape[1] == length)


def _samples(request: ExportDiffRequest, onnx_model: onnx.ModelProto | None,
             module: torch.nn.Module) -> list[dict[str, np.ndarray]]:
    specs = [parse_input_spec(text) for text in request.input_specs]
    if request.inputs_file is not None:
        # Match the file's arrays to the model's inputs by name (and order them), never by position.
        names = [s.name for s in specs] or forward_input_names(module, onnx_model)
        return load_samples_file(request.inputs_file, names)
    if not specs:
        if onnx_model is None:
            raise UsageError("give the model's inputs: --input name:shape:dtype (repeatable) or --inputs file.npz|.pt")
        specs = specs_from_onnx(onnx_model)
    # Batch checks need as many distinct samples as the largest batch.
    count = max([request.num_samples, *request.batch_sizes])
    return random_samples(specs, count, seed=request.seed, max_elements=request.max_input_elements)


def _policy(request: ExportDiffRequest) -> TolerancePolicy:
    overrides = {k: Tolerance(r, a, scale_atol=request.precision != "fp32") for k, (r, a) in request.overrides.items()}
    return TolerancePolicy(rtol=request.rtol, atol=request.atol, overrides=overrides, precision=request.precision)


def run_export_diff(request: ExportDiffRequest, *, progress: ProgressReporter | None = None) -> ExportDiffResult:
    """Load the model and inputs as the request says, compare, and return the result (see :func:`export_diff`)."""
    progress = progress or NullProgress()
    if request.checkpoint is None and request.factory is None:
        raise UsageError("give --checkpoint (a state dict needs --model too) or --model module:callable")
    loaded = load_model(request.checkpoint, request.factory, unsafe_pickle=request.unsafe_pickle, strict=request.strict)
    extra: list[Finding] = []
    if loaded.keys is not None and not loaded.keys.ok:
        extra.append(CHECKPOINT_KEYS.finding(f"loaded non-strict: {loaded.keys.describe()}", where=str(request.checkpoint),
                                             subject=Subject(path=str(request.checkpoint))))
    onnx_model = load_onnx(request.onnx_file) if request.onnx_file else None
    samples = _samples(request, onnx_model, loaded.module)
    check_input_positions(loaded.module, list(samples[0]))
    sequence_inputs = _sequence_inputs(request, samples[0])  # also checks --pad-inputs before any work
    compare_samples = samples[: request.num_samples] if request.inputs_file is None else samples
    cache = _cache(request)
    with ExitStack() as stack:
        deployed, audit_findings, exported = _open_deployment(request, stack, loaded.module, onnx_model, samples,
                                                              progress, cache, sequence_inputs)
        extra.extend(audit_findings)
        result = export_diff(
            loaded.module,
            compare_samples,
            onnx_model=onnx_model,
            exported=exported,
            cache=cache,
            exporter=request.exporter,
            opset=request.opset,
            tolerances=_policy(request),
            precision=request.precision,
            batch_sizes=request.batch_sizes,
            keep_train_mode=request.keep_train_mode,
            deployed=deployed,
            max_intermediate_bytes=request.max_intermediate_bytes,
            progress=progress,
            batch_pool=samples,
            sequence_inputs=sequence_inputs,
        )
        if request.server_layers:
            result = _with_server_layers(request, result, loaded.module, compare_samples[0], bool(deployed), progress)
        if request.pad_check is not None:
            from gapcheck.export_diff.pad_run import with_padding  # only when asked

            result = with_padding(request, result, loaded.module, samples[0], deployed, progress)
    if request.save_onnx is not None:
        save_onnx(result.onnx_model, request.save_onnx)
    return dataclasses.replace(result, findings=tuple(extra) + result.findings) if extra else result


def _cache(request: ExportDiffRequest):
    """The export cache for this request, or None with ``no_cache``; keyed by the factory's source too."""
    if request.no_cache:
        return None
    from gapcheck.model.cache import ExportCache
    from gapcheck.model.factory import resolve_callable

    factory = resolve_callable(request.factory) if isinstance(request.factory, str) else request.factory
    return ExportCache(request.cache_dir, factory=factory)


def _with_server_layers(request, result: ExportDiffResult, module, sample, audited_ok: bool, progress) -> ExportDiffResult:
    target = request.deployment
    if target is None:
        raise UsageError("--triton-layers needs --triton-url and --triton-model")
    if not audited_ok:
        return result  # the audit found config gaps; they are the findings to fix first
    from gapcheck.export_diff.server_layers import compare_on_server  # imports the Triton client: only when asked

    progress.start("comparing layers on the Triton server (twin model)", None)
    rows, findings = compare_on_server(
        result, module, sample, _policy(request), endpoint=target.endpoint, model=target.model,
        version=target.version, twin_files=request.twin_files,
    )
    progress.finish()
    return dataclasses.replace(result, server_layers=rows, findings=result.findings + tuple(findings))


def _open_deployment(request, stack: ExitStack, module, onnx_model, samples, progress, cache=None,
                     sequence_inputs: tuple[str, ...] = ()):
    """Audit the deployment's config first; compare its outputs only when nothing in the config blocks inference.

    Returns the deployed backends, the audit's findings, and the export made for the audit (None with an
    ONNX file), which the comparison then reuses: the model is exported once.
    """
    target = request.deployment
    if target is None:
        return [], [], None
    from gapcheck.backends.triton import TritonBackend
    from gapcheck.triton.audit import audit_deployment

    exported = None
    reference = onnx_model
    if reference is None:
        # In the mode the comparison uses, restored afterwards: the training_mode finding still sees the caller's mode.
        with evaluation_mode(module, request.keep_train_mode):
            exported, _ = obtain_onnx(module, samples[0], exporter=request.exporter, opset=request.opset,
                                      cache=cache, progress=progress, sequence_inputs=sequence_inputs)
        reference = exported.model
    progress.start("auditing the Triton deployment", None)
    audit = audit_deployment(target.endpoint, target.model, onnx_model=reference, version=target.version,
                             torch_module=module)
    progress.finish()
    findings = list(audit.findings)
    if any(f.is_gap for f in findings):
        findings.append(DEPLOYMENT_NOT_COMPARED.finding(
            "outputs of the deployment were not compared: fix the config gaps above first", where=target.model,
            subject=Subject(endpoint=target.model)))
        return [], findings, exported
    backend = stack.enter_context(TritonBackend(target.endpoint, target.model, version=target.version))
    return [backend], findings, exported
