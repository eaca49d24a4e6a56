"""`gapcheck precision`: parse, call :func:`gapcheck.precision.run_precision`, render, exit 0/1 (2 usage/input,
3 a model ONNX Runtime cannot quantize)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from gapcheck.cli.groups import Groups, declare
from gapcheck.groups import ExportSpec, InputSource, ModelSource, ReportTargets, ToleranceSpec

_Precision = Annotated[str, typer.Option("--precision", help="fp16 or int8.")]
_Fix = Annotated[Optional[Path], typer.Option(
    "--fix", help="Write the fixed model here (only once it is verified); the original export is never touched.")]
_Calibration = Annotated[Optional[Path], typer.Option(
    "--calibration", help="INT8 calibration samples: .npz/.pt, a golden bundle, or a folder (with --calibration-stage).")]
_Stage = Annotated[Optional[str], typer.Option(
    "--calibration-stage", help="Preprocessing of a folder of raw samples: NAME=module:callable.")]
_Method = Annotated[str, typer.Option("--calibration-method", help="minmax, entropy or percentile.")]
_Mode = Annotated[str, typer.Option("--int8-mode", help="auto (dynamic for text models), static or dynamic.")]
_Target = Annotated[list[str], typer.Option(
    "--target", help="INT8 target, e.g. top1-agreement=0.99, cosine=0.999, max-rel-error=0.05 (repeatable).")]
_MaxRuns = Annotated[int, typer.Option("--max-runs", min=1, max=10, help="FP16: verification runs at most.")]


@declare(ModelSource, InputSource, ToleranceSpec, ExportSpec, ReportTargets, section="precision")
def command(
    groups: Groups,
    precision: _Precision = "fp16",
    fix: _Fix = None,
    calibration: _Calibration = None,
    calibration_stage: _Stage = None,
    calibration_method: _Method = "minmax",
    int8_mode: _Mode = "auto",
    target: _Target = [],  # noqa: B006 - typer reads the default; it is never mutated
    max_runs: _MaxRuns = 3,
) -> None:
    """Find the modules that break in FP16/INT8, write the model that keeps the fewest in FP32, verify it."""
    from gapcheck.precision import PrecisionRequest, parse_target, run_precision

    request = PrecisionRequest(
        model=groups[ModelSource].require(), inputs=groups[InputSource], tolerance=groups[ToleranceSpec],
        export=groups[ExportSpec], precision=precision.lower(), fix_path=fix, calibration=calibration,
        calibration_stage=calibration_stage, calibration_method=calibration_method.lower(), int8_mode=int8_mode.lower(),
        targets=tuple(parse_target(t) for t in target), max_runs=max_runs)
    raise typer.Exit(groups[ReportTargets].emit(run_precision(request)))
