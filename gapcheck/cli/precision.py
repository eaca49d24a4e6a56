"""`gapcheck precision`: parse, call :func:`gapcheck.precision.run_precision`, render, exit 0/1 (2 usage/input,
3 a model ONNX Runtime cannot quantize). The same run is spelled ``gapcheck export-diff --precision fp16|int8 --fix``
and ``gapcheck export --precision ... --repository``; all three declare :class:`~gapcheck.precision.spec.PrecisionSpec`."""
from __future__ import annotations

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.cli.options import ProgressOpt
from gapcheck.groups import ExportSpec, InputSource, ModelSource, ReportTargets, ToleranceSpec
from gapcheck.precision.spec import PrecisionSpec


@declare(ModelSource, InputSource, ToleranceSpec, ExportSpec, use(PrecisionSpec, precision="fp16"), ReportTargets,
         section="precision")
def command(groups: Groups, progress: ProgressOpt = True) -> None:
    """Find the modules that break in FP16/INT8, write the model that keeps the fewest in FP32, verify it."""
    from rich.console import Console

    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.precision import run_precision

    request = groups[PrecisionSpec].request(model=groups[ModelSource].require(), inputs=groups[InputSource],
                                            tolerance=groups[ToleranceSpec], export=groups[ExportSpec])
    with RichProgress(Console(emoji=False, stderr=True), enabled=progress) as bar:  # --progress/--no-progress as export-diff
        result = run_precision(request, progress=bar)
    raise typer.Exit(groups[ReportTargets].emit(result))
