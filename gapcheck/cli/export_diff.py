"""`gapcheck export-diff`: parse, call :func:`gapcheck.export_diff.run_export_diff`, render, exit 0/1."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from gapcheck.cli.choices import Exporter, Precision, Protocol
from gapcheck.cli.options import (
    AtolOpt,
    CheckpointOpt,
    ConfigOpt,
    HtmlOpt,
    InputOptions,
    InputsFileOpt,
    InputSpecOpt,
    JsonOpt,
    JunitOpt,
    MaxRowsOpt,
    ModelOpt,
    ModelOptions,
    NonStrictOpt,
    NumSamplesOpt,
    ProgressOpt,
    RtolOpt,
    SeedOpt,
    ToleranceOptions,
    ToleranceOverrideOpt,
    UnsafePickleOpt,
    configured,
    emit_reports,
    prepare_reports,
)
from gapcheck.cli.triton_options import (
    ProtocolOpt,
    TritonCertChainOpt,
    TritonHeaderOpt,
    TritonInsecureOpt,
    TritonModelOpt,
    TritonOptions,
    TritonPrivateKeyOpt,
    TritonRetriesOpt,
    TritonRootCertOpt,
    TritonSslOpt,
    TritonTimeoutOpt,
    TritonUrlOpt,
    TritonVersionOpt,
    triton_errors,
)
from gapcheck.errors import ExitCode, UsageError

# The Triton connection flags keep their defaults here as literals so `gapcheck export-diff --help` does not
# import tritonclient; gapcheck.triton.client's DEFAULT_TIMEOUT_S / DEFAULT_RETRIES are the same numbers (tested).
TRITON_TIMEOUT_S = 30.0
TRITON_RETRIES = 3


def parse_batch_sizes(text: str | None) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or any(size < 1 for size in sizes):
        raise UsageError(f"--batch-sizes must be positive integers, got {text!r}")
    return sizes


# export-diff's own options (the shared groups come from gapcheck.cli.options)
_Onnx = Annotated[Optional[Path], typer.Option("--onnx", help="Compare this ONNX file instead of exporting.")]
_Exporter = Annotated[Exporter, typer.Option("--exporter", help="ONNX exporter (dynamo falls back to torchscript).")]
_Opset = Annotated[Optional[int], typer.Option("--opset", help="ONNX opset version.")]
_BatchSizes = Annotated[Optional[str], typer.Option("--batch-sizes", help="Check batch consistency, e.g. 1,4.")]
_Precision = Annotated[Precision, typer.Option("--precision", help="Check what an FP16/BF16 deployment computes.")]
_KeepTrainMode = Annotated[bool, typer.Option(
    "--keep-train-mode", help="Do not switch a training-mode model to eval().")]
_SaveOnnx = Annotated[Optional[Path], typer.Option("--save-onnx", help="Write the compared ONNX model here.")]
_MaxIntermediateMb = Annotated[int, typer.Option(
    "--max-intermediate-mb", min=1, help="Memory for marked ONNX intermediates per run.")]
# The Triton endpoint flags are THE group from gapcheck.cli.triton_options (same names as triton-audit and nightly).
_TritonLayers = Annotated[bool, typer.Option(
    "--triton-layers", help="Also compare layer by layer on the server (loads a temporary twin; needs explicit model control).")]
_TwinFile = Annotated[list[Path], typer.Option(
    "--twin-file", help="A file the twin needs besides model.onnx (e.g. a Python backend's model.py).")]

_CacheDir = Annotated[Optional[Path], typer.Option(
    "--cache-dir", help="Export cache folder (default: ~/.cache/gapcheck/exports or $GAPCHECK_CACHE_DIR).")]
_NoCache = Annotated[bool, typer.Option("--no-cache", help="Always export; neither read nor write the export cache.")]
_PadCheck = Annotated[bool, typer.Option(
    "--pad-check", help="Check padding invariance: sequences padded to other lengths/sides must give the same outputs.")]
_PadSide = Annotated[str, typer.Option("--pad-side", help="Padding side(s) to check: right, left or both.")]
_PadLengths = Annotated[Optional[str], typer.Option(
    "--pad-lengths", help="Padded lengths, e.g. 64,96,128 (default: two lengths up to the input's length).")]
_PadId = Annotated[Optional[int], typer.Option(
    "--pad-id", min=0, help="Token id padding is filled with (default: the model's config.pad_token_id, else 0).")]
_PadInputs = Annotated[Optional[str], typer.Option(
    "--pad-inputs", help="TOKENS[,MASK] input names (default: the first integer input, and an input named *mask*).")]


def parse_pad_check(enabled: bool, side: str, lengths: str | None, inputs: str | None,
                    pad_id: int | None = None) -> Any:
    """The padding-check request from the --pad-* flags (None when --pad-check is not given)."""
    if not enabled:
        if lengths or inputs or side != "right" or pad_id is not None:
            raise UsageError("--pad-side, --pad-lengths, --pad-inputs and --pad-id need --pad-check")
        return None
    from gapcheck.export_diff.api import PadCheckRequest

    sides = {"right": ("right",), "left": ("left",), "both": ("right", "left")}.get(side)
    if sides is None:
        raise UsageError(f"--pad-side must be right, left or both, not {side!r}")
    try:
        parsed = tuple(int(part) for part in (lengths or "").split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--pad-lengths must be comma-separated integers, got {lengths!r}") from None
    if lengths is not None and not parsed:
        raise UsageError(f"--pad-lengths must be comma-separated integers, got {lengths!r}")
    parsed = tuple(sorted(set(parsed)))  # each length runs once
    names = [part.strip() for part in inputs.split(",")] if inputs is not None else []
    if len(names) > 2 or any(not name for name in names):
        raise UsageError(f"--pad-inputs takes TOKENS[,MASK] (two non-empty input names), got {inputs!r}")
    if len(names) == 2 and names[0] == names[1]:
        raise UsageError(f"--pad-inputs names {names[0]!r} as both the token and the mask input")
    return PadCheckRequest(sides=sides, lengths=parsed, token_input=names[0] if names else None,
                           mask_input=names[1] if len(names) > 1 else None, pad_id=pad_id)


#: flag parameter -> [export_diff] key, and -> [triton] key (file < environment < flags)
_EXPORT_DIFF_KEYS = {"exporter": "exporter", "opset": "opset", "precision": "precision", "num_samples": "num_samples",
                     "seed": "seed", "rtol": "rtol", "atol": "atol", "batch_sizes": "batch_sizes",
                     "max_intermediate_mb": "max_intermediate_mb"}
_TRITON_KEYS = {"triton_url": "url", "triton_model": "model", "triton_version": "version", "protocol": "protocol",
                "triton_timeout": "timeout_s", "triton_retries": "retries"}


def command(
    ctx: typer.Context,
    checkpoint: CheckpointOpt = None,
    model: ModelOpt = None,
    input_specs: InputSpecOpt = [],  # noqa: B006 - typer reads the default; it is never mutated
    inputs_file: InputsFileOpt = None,
    onnx_file: _Onnx = None,
    exporter: _Exporter = Exporter.dynamo,
    opset: _Opset = None,
    batch_sizes: _BatchSizes = None,
    num_samples: NumSamplesOpt = 1,
    seed: SeedOpt = 0,
    rtol: RtolOpt = None,
    atol: AtolOpt = None,
    tolerance: ToleranceOverrideOpt = [],  # noqa: B006
    precision: _Precision = Precision.fp32,
    keep_train_mode: _KeepTrainMode = False,
    unsafe_pickle: UnsafePickleOpt = False,
    non_strict: NonStrictOpt = False,
    save_onnx: _SaveOnnx = None,
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
    max_rows: MaxRowsOpt = 0,
    max_intermediate_mb: _MaxIntermediateMb = 1024,
    triton_url: TritonUrlOpt = None,
    triton_model: TritonModelOpt = None,
    protocol: ProtocolOpt = None,
    triton_version: TritonVersionOpt = None,
    triton_header: TritonHeaderOpt = [],  # noqa: B006
    triton_ssl: TritonSslOpt = False,
    triton_ssl_root_cert: TritonRootCertOpt = None,
    triton_ssl_private_key: TritonPrivateKeyOpt = None,
    triton_ssl_cert_chain: TritonCertChainOpt = None,
    triton_ssl_insecure: TritonInsecureOpt = False,
    triton_timeout: TritonTimeoutOpt = TRITON_TIMEOUT_S,
    triton_retries: TritonRetriesOpt = TRITON_RETRIES,
    triton_layers: _TritonLayers = False,
    twin_file: _TwinFile = [],  # noqa: B006
    cache_dir: _CacheDir = None,
    no_cache: _NoCache = False,
    pad_check: _PadCheck = False,
    pad_side: _PadSide = "right",
    pad_lengths: _PadLengths = None,
    pad_inputs: _PadInputs = None,
    pad_id: _PadId = None,
    progress: ProgressOpt = True,
    config: ConfigOpt = None,
) -> None:
    """Export a checkpoint to ONNX and compare it with torch, module by module; name the first module that diverges."""
    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.export_diff.api import ExportDiffRequest, run_export_diff
    from gapcheck.report.console import make_console
    from gapcheck.report.formats.console_format import print_result

    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path)
    padding = parse_pad_check(pad_check, pad_side, pad_lengths, pad_inputs, pad_id)
    given = locals()
    settings = _settings(ctx, config, given)
    tolerances = ToleranceOptions.parse(settings["rtol"], settings["atol"], tolerance)
    loading = ModelOptions(checkpoint, model, unsafe_pickle, strict=not non_strict)
    inputs = InputOptions(tuple(input_specs), inputs_file, settings["num_samples"], settings["seed"])
    request = ExportDiffRequest(
        **loading.fields(), **inputs.fields(), onnx_file=onnx_file, exporter=Exporter(settings["exporter"]).value,
        opset=settings["opset"], batch_sizes=settings["batch_sizes"], rtol=tolerances.rtol, atol=tolerances.atol,
        overrides={**settings["config_tolerances"], **tolerances.overrides},
        precision=Precision(settings["precision"]).value, keep_train_mode=keep_train_mode,
        max_intermediate_bytes=settings["max_intermediate_mb"] * 1024 * 1024, deployment=_deployment(settings, given),
        server_layers=triton_layers, twin_files=tuple(twin_file), save_onnx=save_onnx, cache_dir=cache_dir,
        no_cache=no_cache, pad_check=padding,
    )
    with RichProgress(Console(stderr=True), enabled=progress) as bar, triton_errors():
        result = run_export_diff(request, progress=bar)
    print_result(make_console(), result, max_rows=max_rows or None)
    emit_reports(result, reports)
    raise typer.Exit(ExitCode.for_verdict(result.verdict))


def _settings(ctx: typer.Context, config: Path | None, given: dict[str, Any]) -> dict[str, Any]:
    """The flags, with [export_diff] and [triton] (file < environment) filling the ones left at their default."""
    from gapcheck.config import load_config

    loaded = load_config(config)
    values = {key: given[key] for key in (*_EXPORT_DIFF_KEYS, *_TRITON_KEYS)}
    values["batch_sizes"] = parse_batch_sizes(values["batch_sizes"])
    section = loaded.section("export_diff")
    values.update(configured(ctx, section, _EXPORT_DIFF_KEYS))
    values.update(configured(ctx, loaded.section("triton"), _TRITON_KEYS))
    values["batch_sizes"] = tuple(values["batch_sizes"] or ())
    values["config_tolerances"] = dict(getattr(section, "tolerances", {}) or {})
    return values


def _deployment(settings: dict[str, Any], given: dict[str, Any]) -> Any:
    """The Triton deployment to compare, or None; the URL may name the model itself (grpc://host:8001/MODEL?version=N)."""
    from gapcheck.export_diff.api import DeploymentTarget

    url, model = settings["triton_url"], settings["triton_model"]
    if url is None and model is not None:
        raise UsageError("--triton-url and --triton-model go together")
    if url is None:
        return None
    protocol = Protocol(settings["protocol"]) if settings["protocol"] else None  # None: the URL's scheme, or probed
    endpoint, served_model, served_version = TritonOptions(
        url=url, model=model, protocol=protocol, version=settings["triton_version"], headers=given["triton_header"],
        ssl=given["triton_ssl"], root_cert=given["triton_ssl_root_cert"], private_key=given["triton_ssl_private_key"],
        cert_chain=given["triton_ssl_cert_chain"], insecure=given["triton_ssl_insecure"],
        timeout_s=settings["triton_timeout"], retries=settings["triton_retries"]).target()
    return DeploymentTarget(endpoint, model=served_model, version=served_version)
