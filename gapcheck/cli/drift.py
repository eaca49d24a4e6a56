"""`gapcheck drift`: parse, call :func:`gapcheck.data.api.drift` on the chosen engine, render, exit 0/1."""
from __future__ import annotations

from typing import Annotated

import typer

from gapcheck.cli.groups import Groups, declare
from gapcheck.cli.leakage import ProgressFlag, reports_beside_globs, run_with_engine
from gapcheck.groups import EngineSpec, RemoteSpec, ReportTargets
from gapcheck.groups.data import DriftSpec


@declare(EngineSpec, RemoteSpec, DriftSpec, ReportTargets, section="drift")
def command(
    groups: Groups,
    reference: Annotated[str, typer.Option("--reference", help="Reference split (folder, table, glob, fsspec URL, "
                                                               "pkg.module:dataset).")],
    current: Annotated[str, typer.Option("--current", help="Current split, the same kind as the reference.")],
    progress: ProgressFlag = False,
) -> None:
    """Compare the current split's distributions with the reference's (tables per column, images per property)."""
    from gapcheck.data.api import drift
    from gapcheck.data.drift import DriftOptions

    options = DriftOptions.from_spec(groups[DriftSpec])
    reports = reports_beside_globs(groups[ReportTargets], [("--reference", reference), ("--current", current)])
    result = run_with_engine(groups[EngineSpec], progress, groups[RemoteSpec],
                             lambda e, r: drift(reference, current, options, engine=e, progress=r))
    if not reports.json_on_stdout:
        typer.echo(reports.console_text(result), nl=False)
    raise typer.Exit(reports.emit_files(result))
