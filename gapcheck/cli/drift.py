"""`gapcheck drift`: parse, call :func:`gapcheck.data.api.drift` on the chosen engine, render, exit 0/1."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from gapcheck.cli.groups import Groups, declare
from gapcheck.cli.leakage import ProgressFlag, reports_beside_globs, run_with_engine, split_list
from gapcheck.groups import EngineSpec, RemoteSpec, ReportTargets, check_number


@declare(EngineSpec, RemoteSpec, ReportTargets, section="drift")
def command(
    groups: Groups,
    reference: Annotated[str, typer.Option("--reference", help="Reference split (folder, table, glob, fsspec URL, "
                                                               "pkg.module:dataset).")],
    current: Annotated[str, typer.Option("--current", help="Current split, the same kind as the reference.")],
    columns: Annotated[Optional[list[str]], typer.Option("--columns", help="Columns to compare (comma list); for "
                                                         ".npy/.npz the matrix's column names.")] = None,
    p_threshold: Annotated[Optional[float], typer.Option("--p-threshold", help="BH-corrected p below this (and the "
                                                         "effect ≥ --min-effect) is drift. Default 0.01.")] = None,
    min_effect: Annotated[Optional[float], typer.Option("--min-effect", help="Minimum effect: KS D or "
                                                        "Wasserstein/ref std, Cramér's V. Default 0.1.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the row sample behind the KS tests.")] = 0,
    fail_underpowered: Annotated[Optional[bool], typer.Option("--fail-underpowered", help="Make drift_underpowered "
                                                              "(too few rows to detect --min-effect) a gap.")] = None,
    progress: ProgressFlag = False,
) -> None:
    """Compare the current split's distributions with the reference's (tables per column, images per property)."""
    import gapcheck.data.config  # noqa: F401 - registers [leakage], [drift]
    from gapcheck.cli.leakage import first_given
    from gapcheck.data.api import drift
    from gapcheck.data.drift import DriftOptions
    from gapcheck.report.formats.console_format import render

    check_number(p_threshold, "--p-threshold", low=0.0, low_open=True, high=1.0)
    check_number(min_effect, "--min-effect")
    file = groups.config.section("drift")
    options = DriftOptions(p_threshold=first_given(p_threshold, file.p_threshold, DriftOptions.p_threshold),
                           min_effect=first_given(min_effect, file.min_effect, DriftOptions.min_effect),
                           columns=split_list(columns) or (tuple(file.columns) if file.columns else None), seed=seed,
                           fail_underpowered=first_given(fail_underpowered, file.fail_underpowered, False))
    reports = reports_beside_globs(groups[ReportTargets], [("--reference", reference), ("--current", current)])
    result = run_with_engine(groups[EngineSpec], progress, groups[RemoteSpec],
                             lambda e, r: drift(reference, current, options, engine=e, progress=r))
    if not reports.json_on_stdout:
        typer.echo(render(result), nl=False)
    raise typer.Exit(reports.emit_files(result))
