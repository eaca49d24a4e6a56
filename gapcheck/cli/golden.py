"""`gapcheck golden record` / `gapcheck golden verify`: declared from the option groups; render; exit.

A bundle that fails verification is an InputError (exit 2) naming the file; a recorded or verified
bundle exits 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.cli.options import ProgressOpt
from gapcheck.errors import ExitCode, UsageError
from gapcheck.groups import ExportSpec, InputSource, ModelSource, ReportTargets, ToleranceSpec
from gapcheck.groups.inputs import RECORD_SAMPLES

app = typer.Typer(name="golden", help="Record and verify golden bundles (the released checkpoint's answers).",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.command("record", no_args_is_help=True)
@declare(ModelSource, use(InputSource, num_samples=RECORD_SAMPLES), ToleranceSpec, use(ExportSpec, skip=("save_onnx",)),
         ReportTargets, section="golden")
def record(
    groups: Groups,
    out: Path = typer.Option(..., "--out", help="Folder to write the bundle into (new or empty; --overwrite replaces "
                             "an existing bundle)."),
    samples: Optional[Path] = typer.Option(None, "--samples", help="Raw samples (folder or file) run through --stage."),
    stage: Optional[str] = typer.Option(None, "--stage", help="The inference preprocessing: NAME=module:callable."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the golden bundle already in --out (only a "
                                   "folder whose manifest says it is one)."),
    progress: ProgressOpt = True,
) -> None:
    """Record a golden bundle: inputs, torch and ONNX Runtime outputs, hashes, versions, tolerances."""
    from gapcheck.golden import RecordRequest, record_bundle, recorded_result
    from gapcheck.golden.record import check_out

    if groups[InputSource].file is not None and samples is not None:
        raise UsageError("--inputs and --samples are alternatives: give one")
    check_out(out, overwrite)  # before any work: a user's folder is never replaced
    request = RecordRequest(out=out, model=groups[ModelSource].require(), inputs=groups[InputSource],
                            tolerance=groups[ToleranceSpec], export=groups[ExportSpec], samples=samples, stage=stage,
                            overwrite=overwrite)
    from rich.console import Console

    from gapcheck.cli.rich_progress import RichProgress

    with RichProgress(Console(emoji=False, stderr=True), enabled=progress) as bar:  # --progress/--no-progress as export-diff
        outcome = record_bundle(request, progress=bar)
    groups[ReportTargets].emit(recorded_result(outcome))
    raise typer.Exit(ExitCode.NO_GAP)


@app.command("verify", no_args_is_help=True)
@declare(ReportTargets)
def verify(
    groups: Groups,
    bundle: Path = typer.Argument(..., help="The golden bundle folder."),
) -> None:
    """Verify every file of a golden bundle against the SHA256 in its manifest (exit 2 naming a bad file)."""
    from gapcheck.golden import verify_bundle

    groups[ReportTargets].emit(verify_bundle(bundle))
    raise typer.Exit(ExitCode.NO_GAP)
