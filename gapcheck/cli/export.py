"""`gapcheck export`: parse, call :func:`gapcheck.triton.deploy.export_model_repository`, render, exit 0."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from gapcheck.cli.choices import Exporter
from gapcheck.cli.options import (
    CheckpointOpt,
    HtmlOpt,
    InputSpecOpt,
    JsonOpt,
    JunitOpt,
    ModelOpt,
    NonStrictOpt,
    UnsafePickleOpt,
    emit_reports,
    prepare_reports,
)
from gapcheck.errors import ExitCode


class InstanceKind(str, Enum):
    cpu = "KIND_CPU"
    gpu = "KIND_GPU"
    auto = "KIND_AUTO"


def command(
    triton_repo: Annotated[Path, typer.Option("--triton-repo", help="Model repository directory to write into.")],
    name: Annotated[str, typer.Option("--name", help="Model name in the repository (letters, digits, '_', '.', '-').")],
    input_specs: InputSpecOpt = [],  # noqa: B006 - typer reads the default; it is never mutated
    checkpoint: CheckpointOpt = None,
    model: ModelOpt = None,
    version: Annotated[int, typer.Option("--version", min=1, help="Model version directory.")] = 1,
    exporter: Annotated[Exporter, typer.Option(
        "--exporter", help="ONNX exporter (dynamo falls back to torchscript).")] = Exporter.dynamo,
    opset: Annotated[Optional[int], typer.Option("--opset", help="ONNX opset version.")] = None,
    max_batch_size: Annotated[Optional[int], typer.Option(
        "--max-batch-size", min=0, help="Default: 64 with a dynamic batch axis, else 0.")] = None,
    instance_kind: Annotated[InstanceKind, typer.Option(
        "--instance-kind", help="Triton instance group kind.")] = InstanceKind.cpu,
    unsafe_pickle: UnsafePickleOpt = False,
    non_strict: NonStrictOpt = False,
    save_onnx: Annotated[Optional[Path], typer.Option("--save-onnx", help="Also write the ONNX model here.")] = None,
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
) -> None:
    """Export a checkpoint to ONNX and write a Triton model repository (config.pbtxt + version/model.onnx)."""
    from gapcheck.errors import UsageError
    from gapcheck.report.console import make_console
    from gapcheck.report.formats.console_format import print_result
    from gapcheck.triton.deploy import export_model_repository

    if not input_specs:
        raise UsageError("give the model's inputs: --input name:shape:dtype (repeatable)")
    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path)
    result = export_model_repository(
        checkpoint, model, input_specs, triton_repo, name,
        exporter=exporter.value, opset=opset, version=version, max_batch_size=max_batch_size,
        instance_kind=instance_kind.value, unsafe_pickle=unsafe_pickle, strict=not non_strict,
        save_onnx_path=save_onnx,
    )
    print_result(make_console(), result)
    emit_reports(result, reports)
    raise typer.Exit(ExitCode.for_verdict(result.verdict))
