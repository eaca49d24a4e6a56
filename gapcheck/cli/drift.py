"""`gapcheck drift`: parse, call :func:`gapcheck.data.api.drift` on the chosen engine, render, exit 0/1."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from gapcheck.cli.leakage import AddressOpt, EngineOpt, WorkersOpt, run_with_engine, split_list
from gapcheck.cli.options import (
    ConfigOpt,
    HtmlOpt,
    JsonOpt,
    JunitOpt,
    ProgressOpt,
    SarifOpt,
    configured,
    emit_reports,
    prepare_reports,
)
from gapcheck.errors import ExitCode


def command(
    ctx: typer.Context,
    reference: Annotated[str, typer.Option("--reference", help="Reference split (folder, table, glob, fsspec URL, "
                                                               "pkg.module:dataset).")],
    current: Annotated[str, typer.Option("--current", help="Current split, the same kind as the reference.")],
    columns: Annotated[Optional[list[str]], typer.Option("--columns", help="Columns to compare (comma list); for "
                                                         ".npy/.npz the matrix's column names.")] = None,
    p_threshold: Annotated[Optional[float], typer.Option("--p-threshold", help="BH-corrected p below this (and the "
                                                         "effect ≥ --min-effect) is drift. Default 0.01.")] = None,
    min_effect: Annotated[Optional[float], typer.Option("--min-effect", min=0.0, help="Minimum effect: KS D or "
                                                        "Wasserstein/ref std, Cramér's V. Default 0.1.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the row sample behind the KS tests.")] = 0,
    engine: EngineOpt = None, workers: WorkersOpt = None, engine_address: AddressOpt = None,
    json_path: JsonOpt = None, junit_path: JunitOpt = None, html_path: HtmlOpt = None, sarif_path: SarifOpt = None,
    progress: ProgressOpt = False, config_path: ConfigOpt = None,
) -> None:
    """Compare the current split's distributions with the reference's (tables per column, images per property)."""
    import gapcheck.data.config  # noqa: F401 - registers [engine], [leakage], [drift]
    from gapcheck.config import load_config
    from gapcheck.data.api import drift
    from gapcheck.data.drift import DriftOptions
    from gapcheck.report.formats.console_format import render

    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path, sarif=sarif_path)
    config = load_config(config_path)
    file = configured(ctx, config.section("drift"), {"p_threshold": "p_threshold", "min_effect": "min_effect",
                                                      "columns": "columns"})
    options = DriftOptions(p_threshold=p_threshold if p_threshold is not None else file.get("p_threshold", 0.01),
                           min_effect=min_effect if min_effect is not None else file.get("min_effect", 0.1),
                           columns=split_list(columns) or (tuple(file["columns"]) if file.get("columns") else None),
                           seed=seed)
    result = run_with_engine(ctx, config, engine, workers, engine_address, progress,
                             lambda e, r: drift(reference, current, options, engine=e, progress=r))
    typer.echo(render(result), nl=False)
    emit_reports(result, reports)
    raise typer.Exit(ExitCode.for_verdict(result.verdict))
