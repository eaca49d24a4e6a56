"""`gapcheck export`: declared from the option groups; call :func:`gapcheck.triton.deploy.export_model_repository`,
render, exit 0. With ``--precision fp16|int8`` the repository gets the fixed model, and only once it is verified
(:func:`gapcheck.triton.deploy.export_precision_repository`, the one precision run): exit 0 deployed, 1 not fixed."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.groups import ExportSpec, InputSource, ModelSource, ReportTargets, ToleranceSpec
from gapcheck.precision.spec import PrecisionSpec


class InstanceKind(str, Enum):
    cpu = "KIND_CPU"
    gpu = "KIND_GPU"
    auto = "KIND_AUTO"


@declare(ModelSource, use(InputSource, skip=("file", "num_samples", "seed")), ExportSpec,
         use(PrecisionSpec, skip=("fix",)), ToleranceSpec, ReportTargets)
def command(
    groups: Groups,
    triton_repo: Annotated[Path, typer.Option(
        "--triton-repo", "--repository", help="Model repository directory to write into.")],
    name: Annotated[str, typer.Option("--name", help="Model name in the repository (letters, digits, '_', '.', '-').")],
    # Triton reads a version folder's name as a signed 64-bit integer: a bigger one is a folder it never loads
    version: Annotated[int, typer.Option("--version", min=1, max=2**63 - 1, help="Model version directory.")] = 1,
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

    model, inputs, spec = groups[ModelSource].require(), groups[InputSource], groups[PrecisionSpec]
    if not inputs.specs:
        raise UsageError("give the model's inputs: --input name:shape:dtype (repeatable)")
    spec.require_precision(spec.precision, plain="a plain export")
    if spec.precision is not None:
        from gapcheck.triton.deploy import export_precision_repository

        request = spec.request(model=model, inputs=inputs, tolerance=groups[ToleranceSpec], export=groups[ExportSpec])
        result = export_precision_repository(request, triton_repo, name, version=version,
                                             max_batch_size=max_batch_size, instance_kind=instance_kind.value,
                                             overwrite=overwrite)
        raise typer.Exit(groups[ReportTargets].emit(result))
    result = export_model_repository(model, inputs.specs, triton_repo, name, export=groups[ExportSpec],
                                     version=version, max_batch_size=max_batch_size, instance_kind=instance_kind.value,
                                     overwrite=overwrite)
    raise typer.Exit(groups[ReportTargets].emit(result))
