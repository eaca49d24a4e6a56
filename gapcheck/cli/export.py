"""`gapcheck export`: declared from the option groups; call :func:`gapcheck.triton.deploy.export_model_repository`,
render, exit 0."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.groups import ExportSpec, InputSource, ModelSource, ReportTargets


class InstanceKind(str, Enum):
    cpu = "KIND_CPU"
    gpu = "KIND_GPU"
    auto = "KIND_AUTO"


@declare(ModelSource, use(InputSource, skip=("file", "num_samples", "seed")), ExportSpec, ReportTargets)
def command(
    groups: Groups,
    triton_repo: Annotated[Path, typer.Option("--triton-repo", help="Model repository directory to write into.")],
    name: Annotated[str, typer.Option("--name", help="Model name in the repository (letters, digits, '_', '.', '-').")],
    version: Annotated[int, typer.Option("--version", min=1, help="Model version directory.")] = 1,
    max_batch_size: Annotated[Optional[int], typer.Option(
        "--max-batch-size", min=0, help="Default: 64 with a dynamic batch axis, else 0.")] = None,
    instance_kind: Annotated[InstanceKind, typer.Option(
        "--instance-kind", help="Triton instance group kind.")] = InstanceKind.cpu,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the model already in --triton-repo/--name "
                                            "(its config.pbtxt and this version's model.onnx).")] = False,
) -> None:
    """Export a checkpoint to ONNX and write a Triton model repository (config.pbtxt + version/model.onnx)."""
    from gapcheck.errors import UsageError
    from gapcheck.triton.deploy import export_model_repository

    model, inputs = groups[ModelSource].require(), groups[InputSource]
    if not inputs.specs:
        raise UsageError("give the model's inputs: --input name:shape:dtype (repeatable)")
    result = export_model_repository(model, inputs.specs, triton_repo, name, export=groups[ExportSpec],
                                     version=version, max_batch_size=max_batch_size, instance_kind=instance_kind.value,
                                     overwrite=overwrite)
    raise typer.Exit(groups[ReportTargets].emit(result))
