"""The export-diff entry point a CLI or a notebook calls: load, draw inputs, audit the deployment, compare.

The request holds the option groups (:mod:`gapcheck.groups`); each builds its part: ``ModelSource.load()``,
``InputSource.samples()``, ``ToleranceSpec.policy(precision)``, ``ExportSpec.cache()/obtain()/save()``.
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gapcheck.codes.export_diff import (
    CHECKPOINT_KEYS,
    CHECKPOINT_WEIGHTS,
    DEPLOYMENT_NOT_COMPARED,
    FP16_FILE,
    PRECISION_NOT_THE_FILES,
)
from gapcheck.errors import UsageError
from gapcheck.export_diff.result import ExportDiffResult
from gapcheck.export_diff.runner import (
    DEFAULT_MAX_INTERMEDIATE_BYTES,
    ExportOptions,
    evaluation_mode,
    export_diff,
)
from gapcheck.findings import Finding, Subject
from gapcheck.groups import ExportSpec, InputSource, ModelSource, ToleranceSpec, TritonTarget
from gapcheck.groups.inputs import forward_input_names, specs_from_onnx  # noqa: F401 - their old home, re-exported
from gapcheck.groups.keywords import KEYWORDS, fill_request
from gapcheck.model.onnx_file import computes_in_fp16, load_onnx, with_fp32_inputs
from gapcheck.progress import NullProgress, ProgressReporter
from gapcheck.triton.client import TritonEndpoint

log = logging.getLogger(__name__)
_HOLDERS = {ModelSource: "model", InputSource: "inputs", ToleranceSpec: "tolerance", ExportSpec: "export"}


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


@dataclass(frozen=True, init=False)
class ExportDiffRequest:
    """Everything ``gapcheck export-diff`` can be asked, as one value: the groups it is made of, and its own options.

    Python callers may pass the groups or the library keywords they are built from (``factory=``, ``input_specs=``,
    ``rtol=``, ``exporter=``, ...: :mod:`gapcheck.groups.keywords`); those names read back too (``request.factory``).
    ``triton`` is the deployment's group (its ``output_map`` names served outputs); ``deployment`` the endpoint to
    compare, built from it by the CLI (or given directly).
    """

    model: ModelSource
    inputs: InputSource
    tolerance: ToleranceSpec
    export: ExportSpec
    triton: TritonTarget | None = None
    onnx_file: Path | None = None
    batch_sizes: tuple[int, ...] = ()
    precision: str | None = None  # None: the file's (or deployment's) own; "fp32" asks FP32 budgets even for FP16
    keep_train_mode: bool = False
    max_intermediate_bytes: int = DEFAULT_MAX_INTERMEDIATE_BYTES
    deployment: DeploymentTarget | None = None
    server_layers: bool = False  # also compare layer by layer on the server, through a temporary twin
    twin_files: tuple[Path, ...] = ()  # files the twin needs besides model.onnx (e.g. a Python backend's model.py)
    pad_check: PadCheckRequest | None = None  # also check padding invariance on every backend

    def __init__(self, **values: Any) -> None:
        fill_request(self, values, {"model": ModelSource(), "inputs": InputSource(), "tolerance": ToleranceSpec(),
                                    "export": ExportSpec()})

    def __getattr__(self, name: str) -> Any:
        """The library keywords read back from the groups (``request.factory`` is ``request.model.factory``)."""
        if name in KEYWORDS:
            group, attribute = KEYWORDS[name]
            return getattr(object.__getattribute__(self, _HOLDERS[group]), attribute)
        raise AttributeError(name)

    def policy(self) -> Any:
        """THE tolerance policy of this run (the comparison, the server's layers and the padding check use it)."""
        return self.tolerance.policy(self.precision or "fp32")


def check_input_positions(module: torch.nn.Module, names: list[str]) -> None:
    """Inputs reach ``forward`` by position: refuse names that are forward's parameters at other positions.

    Input specs ``input_ids:...``, ``attention_mask:...`` on GPT-2 would otherwise feed the mask to its second
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
    """With a pad check and gapcheck's own export: the inputs exported with a dynamic sequence axis (every input
    shaped like the token input, as the padding check pads them), so ONNX Runtime can run every padded length."""
    if request.pad_check is None or request.onnx_file is not None:
        return ()
    from gapcheck.export_diff.pad_run import token_and_mask

    token, _ = token_and_mask(sample, request.pad_check.token_input, request.pad_check.mask_input,
                               request.inputs.specs)
    length = sample[token].shape[1]
    return tuple(name for name, array in sample.items() if array.ndim >= 2 and array.shape[1] == length)


def run_export_diff(request: ExportDiffRequest, *, progress: ProgressReporter | None = None) -> ExportDiffResult:
    """Load the model and inputs as the request says, compare, and return the result (see :func:`export_diff`)."""
    progress = progress or NullProgress()
    loaded = request.model.load()
    extra: list[Finding] = []
    if loaded.keys is not None and not loaded.keys.ok:
        where = str(request.model.checkpoint)
        extra.append(CHECKPOINT_KEYS.finding(f"loaded non-strict: {loaded.keys.describe()}", where=where,
                                             subject=Subject(path=where)))
    weights = loaded.describe_weights()
    if weights is not None:  # which key of the file, the other sets it holds, a stripped prefix: never silently
        where = str(request.model.checkpoint)
        extra.append(CHECKPOINT_WEIGHTS.finding(weights, where=where, subject=Subject(path=where)))
    onnx_model = load_onnx(request.onnx_file) if request.onnx_file else None
    served = onnx_model  # the file as written: what a deployment's config is audited against
    if onnx_model is not None and computes_in_fp16(onnx_model):
        onnx_model = with_fp32_inputs(onnx_model)  # an FP16 file with FP16 inputs is fed the model's FP32 samples
    # the whole run (layers, padding check, the server's layers) compares in the file's precision, unless asked
    asked = request.precision
    precision, said = file_precision(asked, onnx_model, str(request.onnx_file))
    extra.extend(said)
    request = dataclasses.replace(request, precision=precision)
    # Batch checks need as many distinct samples as the largest batch.
    count = max([request.inputs.num_samples, *request.batch_sizes])
    samples = request.inputs.samples(module=loaded.module, onnx_model=onnx_model, count=count)
    check_input_positions(loaded.module, list(samples[0]))
    sequence_inputs = _sequence_inputs(request, samples[0])  # also checks the pad check's inputs before any work
    compare_samples = samples[: request.inputs.num_samples] if request.inputs.file is None else samples
    cache = request.export.cache(request.model)
    with ExitStack() as stack:
        deployed, audit_findings, exported, fp16 = _open_deployment(request, stack, loaded.module, served, samples,
                                                                    progress, cache, sequence_inputs, asked)
        extra.extend(audit_findings)
        if fp16:  # a deployment that computes in FP16 is compared in FP16 (the whole run), unless asked otherwise
            request = _deployment_precision(request, asked, extra)
        result = export_diff(
            loaded.module,
            compare_samples,
            onnx_model=onnx_model,
            export=ExportOptions(exporter=request.export.exporter, opset=request.export.opset, cache=cache,
                                 sequence_inputs=tuple(sequence_inputs), exported=exported),
            tolerances=request.policy(),
            precision=request.precision or "fp32",  # resolved above: never None here
            batch_sizes=request.batch_sizes,
            keep_train_mode=request.keep_train_mode,
            deployed=deployed,
            max_intermediate_bytes=request.max_intermediate_bytes,
            progress=progress,
            batch_pool=samples,
        )
        if request.server_layers:
            result = _with_server_layers(request, result, loaded.module, compare_samples[0], bool(deployed), progress)
        if request.pad_check is not None:
            from gapcheck.export_diff.pad_run import with_padding  # only when asked

            result = with_padding(request, result, loaded.module, samples[0], deployed, progress)
    request.export.save(result.onnx_model)
    return dataclasses.replace(result, findings=tuple(extra) + result.findings) if extra else result


def file_precision(asked: str | None, onnx_model: Any, where: str = "onnx") -> tuple[str, list[Finding]]:
    """The precision to compare in, and the findings that say why.

    Not asked (None): the file's own. An ONNX file that computes in FP16 (a deployment's converted file, FP32 inputs
    and outputs around an FP16 body) is compared with FP16 budgets (``fp16_file``): FP32 budgets would report its
    rounding as a gap at the first module. Asked: the budgets asked, always; when they are not the file's
    (``--precision fp32`` or ``bf16`` on an FP16 file) the file still runs as written and
    ``precision_not_the_files`` says what a gap then means."""
    check_precision(asked)
    fp16 = onnx_model is not None and computes_in_fp16(onnx_model)
    if asked is None:
        if not fp16:
            return "fp32", []
        return "fp16", [FP16_FILE.finding(f"{where} computes in FP16: compared with FP16 budgets", where=where,
                                          subject=Subject(path=where))]
    if fp16 and asked != "fp16":
        return asked, [precision_not_the_files(where, "the file", asked, Subject(path=where))]
    return asked, []


def precision_not_the_files(where: str, what: str, asked: str, subject: Subject) -> Finding:
    """``what`` (the file, the deployment) computes in FP16 but other budgets were asked: they are used, and the
    message says what a gap found with them means."""
    if asked == "fp32":
        consequence = ("FP16 rounding alone exceeds FP32 budgets, so a gap from the first module on is what they "
                       "report")
    else:
        consequence = f"{asked.upper()} budgets are wider than FP16's: a gap under them is beyond FP16 rounding too"
    return PRECISION_NOT_THE_FILES.finding(
        f"{where}: {what} computes in FP16 but precision {asked} was asked (--precision or [export_diff] precision): "
        f"compared with {asked.upper()} budgets as asked; {consequence}. Leave --precision out to compare in {what}'s "
        "own precision (FP16)", where=where, subject=subject,
        evidence={"computes_in": "fp16", "asked": asked})


def check_precision(asked: Any) -> None:
    """A precision from Python is checked as the command line's is (None: not asked)."""
    if asked is not None and asked not in ("fp32", "fp16", "bf16"):
        raise UsageError(f"precision must be fp32, fp16 or bf16 (or None: the file's own), not {asked!r}",
                         parameter="precision")


def _with_server_layers(request, result: ExportDiffResult, module, sample, audited_ok: bool, progress) -> ExportDiffResult:
    target = request.deployment
    if target is None:
        raise UsageError("comparing layers on the server needs a deployment to compare (an endpoint and a model)",
                         parameter="server_layers")
    if not audited_ok:
        return result  # the audit found config gaps; they are the findings to fix first
    from gapcheck.export_diff.server_layers import compare_on_server  # imports the Triton client: only when asked

    progress.start("comparing layers on the Triton server (twin model)", None)
    rows, findings = compare_on_server(
        result, module, sample, request.policy(), endpoint=target.endpoint, model=target.model,
        version=target.version, twin_files=request.twin_files,
    )
    progress.finish()
    return dataclasses.replace(result, server_layers=rows, findings=result.findings + tuple(findings))


def _deployment_precision(request: ExportDiffRequest, asked: str | None, extra: list[Finding]) -> ExportDiffRequest:
    """The run's precision once the deployment is known to compute in FP16: FP16 when nothing was asked; asked other
    budgets are kept and said (once: an FP16 file asked otherwise has said it already)."""
    if asked is None:
        return dataclasses.replace(request, precision="fp16")
    said = any(f.code == PRECISION_NOT_THE_FILES.code for f in extra)
    if asked != "fp16" and not said and request.deployment is not None:
        model = request.deployment.model
        extra.append(precision_not_the_files(model, "the deployment", asked, Subject(endpoint=model)))
    return request


def _open_deployment(request, stack: ExitStack, module, onnx_model, samples, progress, cache=None,
                     sequence_inputs: tuple[str, ...] = (), asked: str | None = None):
    """Audit the deployment's config first; compare its outputs only when nothing in the config blocks inference.

    Returns the deployed backends, the audit's findings, the export made for the audit (None with an ONNX file),
    which the comparison then reuses (the model is exported once), and whether the deployment computes in FP16
    (:mod:`~gapcheck.export_diff.served_precision`; ``asked``: the precision asked, None if none).
    """
    target = request.deployment
    if target is None:
        return [], [], None, False
    from gapcheck.backends.triton import TritonBackend
    from gapcheck.triton.audit import audit_deployment

    exported = None
    reference = onnx_model
    if reference is None:
        # In the mode the comparison uses, restored afterwards: the training_mode finding still sees the caller's mode.
        with evaluation_mode(module, request.keep_train_mode):
            exported, _ = request.export.obtain(module, samples[0], cache=cache, progress=progress,
                                                sequence_inputs=sequence_inputs)
        reference = exported.model
    progress.start("auditing the Triton deployment", None)
    maps = {"input_map": request.triton.inputs(), "output_map": request.triton.outputs()} if request.triton else {}
    audit = audit_deployment(target.endpoint, target.model, onnx_model=reference, version=target.version,
                             torch_module=module, **maps)
    progress.finish()
    from gapcheck.export_diff.served_names import blocks_comparison, not_served_outputs, served_output_names
    from gapcheck.export_diff.served_precision import served_precision

    # FP16 declared where gapcheck's export has FP32 is the deployment's precision, not a gap (served_precision).
    precision = served_precision(audit, list(audit.findings), own_export=onnx_model is None, budgets=asked or "fp16")
    # A deployment that names its outputs its own way (same count, order, shapes, dtypes) is paired by position or by
    # the group's output map and compared by value; the naming is a warning, a real mismatch stays the audit's gap.
    mapped = request.triton.outputs() if request.triton else None
    findings, output_map = served_output_names(audit, mapped, fp16=precision.fp16, findings=precision.findings)
    # Outputs it does not serve are gaps of their own; the ones it serves are still compared.
    not_served = not_served_outputs(audit, mapped)
    if any(blocks_comparison(f, not_served, len(audit.onnx_outputs)) for f in findings):
        findings.append(DEPLOYMENT_NOT_COMPARED.finding(
            "outputs of the deployment were not compared: fix the config gaps above first", where=target.model,
            subject=Subject(endpoint=target.model)))
        return [], findings, exported, False
    casts = {"input_dtypes": precision.input_dtypes} if precision.input_dtypes else {}  # only an FP16 deployment's
    backend = stack.enter_context(TritonBackend(target.endpoint, target.model, version=target.version,
                                                output_map=output_map, input_map=dict(audit.input_map),
                                                not_served=not_served, **casts))
    return [backend], findings, exported, precision.fp16
