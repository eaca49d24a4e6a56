"""`gapcheck triton-audit`: declared from the option groups; call :func:`gapcheck.triton.audit.audit_deployment`,
render, exit 0/1."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.cli.triton_options import triton_errors
from gapcheck.groups import ReportTargets, TritonTarget

OnnxOpt = Annotated[Path, typer.Option("--onnx", help="The ONNX model the deployment should serve.")]
#: one request at a time, no total deadline
AUDIT_TRITON = use(TritonTarget, skip=("deadline_s",))


@declare(AUDIT_TRITON, ReportTargets)
def command(groups: Groups, onnx_file: OnnxOpt) -> None:
    """Diff a Triton deployment's config and metadata against the ONNX graph (names, dtypes, dims, batch, versions)."""
    from gapcheck.triton.audit import audit_deployment

    with triton_errors():
        target = groups[TritonTarget]
        endpoint, model, version = target.target()
        result = audit_deployment(endpoint, model, onnx_model=onnx_file, version=version, input_map=target.inputs(),
                                  output_map=target.outputs())
    raise typer.Exit(groups[ReportTargets].emit(result))
