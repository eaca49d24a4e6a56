"""`gapcheck export-diff`: parse, call :func:`gapcheck.export_diff.run_export_diff`, render, exit 0/1."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from gapcheck.cli.choices import Exporter, Precision, Protocol
from gapcheck.cli.rich_progress import RichProgress
from gapcheck.cli.triton_options import triton_endpoint
from gapcheck.triton.client import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S
from gapcheck.errors import ExitCode, UsageError
from gapcheck.export_diff.api import DeploymentTarget, ExportDiffRequest, run_export_diff
from gapcheck.report.console import make_console
from gapcheck.report.export_diff import json_payload, junit_cases, render_console
from gapcheck.report.json_report import write_json
from gapcheck.report.junit import write_junit


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


def parse_overrides(items: list[str]) -> dict[str, tuple[float, float]]:
    """``--tolerance 'layer1.*=1e-3,1e-4'`` -> {pattern: (rtol, atol)}."""
    overrides = {}
    for item in items:
        pattern, _, numbers = item.partition("=")
        try:
            rtol, atol = (float(x) for x in numbers.split(","))
        except ValueError:
            raise UsageError(f"--tolerance expects PATTERN=RTOL,ATOL, got {item!r}") from None
        overrides[pattern.strip()] = (rtol, atol)
    return overrides


def command(
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="State dict (.pt/.pth/.safetensors) or TorchScript archive."),
    model: Optional[str] = typer.Option(None, "--model", help="Factory building the model: 'pkg.module:callable' or 'path/file.py:callable'."),
    input_specs: list[str] = typer.Option([], "--input", help="name:shape:dtype[:low,high], e.g. x:1x3x224x224:float32 (repeatable)."),
    inputs_file: Optional[Path] = typer.Option(None, "--inputs", help="Real inputs: .npz or .pt, axis 0 = samples."),
    onnx_file: Optional[Path] = typer.Option(None, "--onnx", help="Compare this ONNX file instead of exporting."),
    exporter: Exporter = typer.Option(Exporter.dynamo, "--exporter", help="ONNX exporter (dynamo falls back to torchscript)."),
    opset: Optional[int] = typer.Option(None, "--opset", help="ONNX opset version."),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="Check batch consistency, e.g. 1,4."),
    num_samples: int = typer.Option(1, "--num-samples", min=1, help="Random input draws (ignored with --inputs)."),
    seed: int = typer.Option(0, "--seed", help="Seed for random inputs."),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance (default: per dtype)."),
    atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance (default: per dtype)."),
    tolerance: list[str] = typer.Option([], "--tolerance", help="Per-module override PATTERN=RTOL,ATOL (glob; repeatable)."),
    precision: Precision = typer.Option(Precision.fp32, "--precision", help="Check what an FP16/BF16 deployment computes."),
    keep_train_mode: bool = typer.Option(False, "--keep-train-mode", help="Do not switch a training-mode model to eval()."),
    unsafe_pickle: bool = typer.Option(False, "--unsafe-pickle", help="Allow loading a full pickled module (runs code from the file!)."),
    non_strict: bool = typer.Option(False, "--non-strict", help="Load a checkpoint whose keys do not all match (reported)."),
    save_onnx: Optional[Path] = typer.Option(None, "--save-onnx", help="Write the compared ONNX model here."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the JSON report here."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report here."),
    max_rows: int = typer.Option(0, "--max-rows", help="Rows of the module table to print (0: all)."),
    max_intermediate_mb: int = typer.Option(1024, "--max-intermediate-mb", min=1, help="Memory for marked ONNX intermediates per run."),
    triton_url: Optional[str] = typer.Option(None, "--triton-url", help="Also compare a Triton deployment (host:port)."),
    triton_model: Optional[str] = typer.Option(None, "--triton-model", help="Model name on the Triton server."),
    protocol: Protocol = typer.Option(Protocol.grpc, "--protocol", help="Triton protocol."),
    triton_version: Optional[str] = typer.Option(None, "--triton-version", help="Model version on the server."),
    triton_header: list[str] = typer.Option([], "--triton-header", help="Extra request header KEY:VALUE (e.g. auth; never printed)."),
    triton_ssl: bool = typer.Option(False, "--triton-ssl", help="Use TLS for the Triton connection."),
    triton_ssl_root_cert: Optional[Path] = typer.Option(None, "--triton-ssl-root-cert", help="CA certificate (PEM)."),
    triton_ssl_private_key: Optional[Path] = typer.Option(None, "--triton-ssl-private-key", help="Client private key (PEM)."),
    triton_ssl_cert_chain: Optional[Path] = typer.Option(None, "--triton-ssl-cert-chain", help="Client certificate chain (PEM)."),
    triton_ssl_insecure: bool = typer.Option(False, "--triton-ssl-insecure", help="TLS without verifying the server certificate."),
    triton_timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--triton-timeout", help="Seconds per Triton request."),
    triton_retries: int = typer.Option(DEFAULT_RETRIES, "--triton-retries", help="Retries of transient Triton failures."),
    triton_layers: bool = typer.Option(False, "--triton-layers", help="Also compare layer by layer on the server (loads a temporary twin; needs explicit model control)."),
    twin_file: list[Path] = typer.Option([], "--twin-file", help="A file the twin needs besides model.onnx (e.g. a Python backend's model.py)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars."),
) -> None:
    """Export a checkpoint to ONNX and compare it with torch, module by module; name the first module that diverges."""
    if (triton_url is None) != (triton_model is None):
        raise UsageError("--triton-url and --triton-model go together")
    request = ExportDiffRequest(
        checkpoint=checkpoint,
        factory=model,
        input_specs=tuple(input_specs),
        inputs_file=inputs_file,
        onnx_file=onnx_file,
        exporter=exporter.value,
        opset=opset,
        batch_sizes=parse_batch_sizes(batch_sizes),
        num_samples=num_samples,
        seed=seed,
        rtol=rtol,
        atol=atol,
        overrides=parse_overrides(tolerance),
        precision=precision.value,
        keep_train_mode=keep_train_mode,
        unsafe_pickle=unsafe_pickle,
        strict=not non_strict,
        max_intermediate_bytes=max_intermediate_mb * 1024 * 1024,
        deployment=None if triton_url is None else DeploymentTarget(
            triton_endpoint(triton_url, protocol=protocol, headers=triton_header, header_flag="--triton-header",
                            ssl=triton_ssl, root_cert=triton_ssl_root_cert, private_key=triton_ssl_private_key,
                            cert_chain=triton_ssl_cert_chain, insecure=triton_ssl_insecure,
                            timeout_s=triton_timeout, retries=triton_retries),
            model=triton_model, version=triton_version,
        ),
        server_layers=triton_layers,
        twin_files=tuple(twin_file),
        save_onnx=save_onnx,
    )
    console = make_console()
    with RichProgress(Console(stderr=True), enabled=not no_progress) as progress:
        result = run_export_diff(request, progress=progress)
    render_console(console, result, max_rows=max_rows or None)
    if json_path:
        write_json(json_path, "export-diff", json_payload(result))
    if junit_path:
        write_junit(junit_path, "gapcheck.export-diff", junit_cases(result))
    raise typer.Exit(ExitCode.NO_GAP if result.verdict == "pass" else ExitCode.GAP_FOUND)
