"""`gapcheck export`: parse, call :func:`gapcheck.triton.deploy.export_model_repository`, render, exit 0."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from gapcheck.cli.choices import Exporter
from rich.markup import escape

from gapcheck.errors import ExitCode
from gapcheck.report.console import make_console
from gapcheck.report.json_report import write_json
from gapcheck.triton.deploy import ExportRepositoryResult, export_model_repository


class InstanceKind(str, Enum):
    cpu = "KIND_CPU"
    gpu = "KIND_GPU"
    auto = "KIND_AUTO"


def render(result: ExportRepositoryResult) -> None:
    console = make_console()
    exporter = result.exporter + (f" (dynamo failed: {result.fallback_reason})" if result.fallback_reason else "")
    console.print(f"[bold green]exported[/bold green] {escape(result.name)} version {result.version} "
                  f"to {escape(str(result.model_dir))}")
    console.print(f"  exporter {escape(exporter)}, max_batch_size {result.max_batch_size}, "
                  f"batch axis {'dynamic' if result.dynamic_batch else 'fixed'}")
    console.print(f"  {escape(str(result.config_path))}\n  {escape(str(result.onnx_path))}")
    for note in result.notes:
        console.print(f"  [yellow]note:[/yellow] {escape(note)}")


def command(
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", help="State dict (.pt/.pth/.safetensors) or TorchScript archive."),
    model: Optional[str] = typer.Option(None, "--model", help="Factory building the model: 'pkg.module:callable' or 'path/file.py:callable'."),
    input_specs: list[str] = typer.Option(..., "--input", help="name:shape:dtype, e.g. x:1x3x224x224:float32 (repeatable)."),
    triton_repo: Path = typer.Option(..., "--triton-repo", help="Model repository directory to write into."),
    name: str = typer.Option(..., "--name", help="Model name in the repository."),
    version: int = typer.Option(1, "--version", min=1, help="Model version directory."),
    exporter: Exporter = typer.Option(Exporter.dynamo, "--exporter", help="ONNX exporter (dynamo falls back to torchscript)."),
    opset: Optional[int] = typer.Option(None, "--opset", help="ONNX opset version."),
    max_batch_size: Optional[int] = typer.Option(None, "--max-batch-size", min=0, help="Default: 64 with a dynamic batch axis, else 0."),
    instance_kind: InstanceKind = typer.Option(InstanceKind.cpu, "--instance-kind", help="Triton instance group kind."),
    unsafe_pickle: bool = typer.Option(False, "--unsafe-pickle", help="Allow loading a full pickled module (runs code from the file!)."),
    non_strict: bool = typer.Option(False, "--non-strict", help="Load a checkpoint whose keys do not all match."),
    save_onnx: Optional[Path] = typer.Option(None, "--save-onnx", help="Also write the ONNX model here."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the JSON report here."),
) -> None:
    """Export a checkpoint to ONNX and write a Triton model repository (config.pbtxt + version/model.onnx)."""
    result = export_model_repository(
        checkpoint, model, input_specs, triton_repo, name,
        exporter=exporter.value, opset=opset, version=version, max_batch_size=max_batch_size,
        instance_kind=instance_kind.value, unsafe_pickle=unsafe_pickle, strict=not non_strict,
        save_onnx_path=save_onnx,
    )
    render(result)
    if json_path is not None:
        write_json(json_path, "export", {"verdict": result.verdict, "result": result})
    raise typer.Exit(ExitCode.NO_GAP)
