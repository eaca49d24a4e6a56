"""`gapcheck leakage`: parse, call :func:`gapcheck.data.api.leakage` on the chosen engine, render, exit 0/1."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

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
from gapcheck.engines import EngineKind
from gapcheck.errors import ExitCode

EngineOpt = Annotated[Optional[EngineKind], typer.Option("--engine", help="Where shards run: local (process pool, "
                                                         "the default), serial, or ray.")]
WorkersOpt = Annotated[Optional[int], typer.Option("--workers", min=1, help="Worker processes (local engine).")]
AddressOpt = Annotated[Optional[str], typer.Option("--engine-address", help="Ray cluster address (ray://head:10001); "
                                                   "default: RAY_ADDRESS or a local Ray.")]


def split_list(values: list[str] | None) -> tuple[str, ...] | None:
    parts = [p.strip() for v in values or () for p in v.split(",") if p.strip()]
    return tuple(parts) or None


def run_with_engine(ctx: typer.Context, config, engine, workers, address, progress: bool, call):  # type: ignore[no-untyped-def]
    """Open the engine (flag < config's [engine]), run ``call(engine, reporter)``, always close the engine."""
    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.engines import open_engine

    section = config.section("engine")
    given = configured(ctx, section, {"engine": "name", "workers": "workers", "address": "address"})
    kind = engine or EngineKind(given.get("engine", "local"))
    options = {"workers": workers or given.get("workers"), "address": address or given.get("address")}
    if kind is not EngineKind.ray:
        options.pop("address") if options["address"] is None else None
    with RichProgress(enabled=progress) as reporter, open_engine(kind, **options) as opened:
        return call(opened, reporter)


def command(
    ctx: typer.Context,
    split: Annotated[list[str], typer.Option("--split", help="name=location (folder, file, glob, fsspec URL or "
                                                             "pkg.module:dataset). Two or more.")],
    labels: Annotated[Optional[Path], typer.Option("--labels", help="CSV with path,label[,group] for image splits.")] = None,
    near: Annotated[Optional[float], typer.Option("--near", min=0.0, max=1.0,
                                                  help="Near-duplicate similarity (0.9: ≤ 6 of 64 pHash bits differ).")] = None,
    key: Annotated[Optional[list[str]], typer.Option("--key", help="Key columns for table rows (comma list).")] = None,
    group_column: Annotated[Optional[str], typer.Option("--group-column", help="Group id column (patient, user).")] = None,
    label_column: Annotated[Optional[str], typer.Option("--label-column", help="Label column of table splits.")] = None,
    columns: Annotated[Optional[list[str]], typer.Option("--columns", help="Column names of .npy/.npz matrices.")] = None,
    engine: EngineOpt = None, workers: WorkersOpt = None, engine_address: AddressOpt = None,
    json_path: JsonOpt = None, junit_path: JunitOpt = None, html_path: HtmlOpt = None, sarif_path: SarifOpt = None,
    progress: ProgressOpt = False, config_path: ConfigOpt = None,
) -> None:
    """Find samples shared across splits: exact and near duplicates, group overlap, label conflicts, target leakage."""
    import gapcheck.data.config  # noqa: F401 - registers [engine], [leakage], [drift]
    from gapcheck.config import load_config
    from gapcheck.data.api import leakage
    from gapcheck.data.leakage import LeakageOptions
    from gapcheck.data.sources import SourceSpec, parse_split
    from gapcheck.report.formats.console_format import render

    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path, sarif=sarif_path)
    config = load_config(config_path)
    file = configured(ctx, config.section("leakage"), {"near": "near", "key": "key", "group_column": "group_column",
                                                        "label_column": "label_column", "labels": "labels"})
    names = split_list(columns)
    specs = [SourceSpec(s.name, s.location, names) for s in map(parse_split, split)]
    options = LeakageOptions(near=near if near is not None else file.get("near", 0.9),
                             key_columns=split_list(key) or (tuple(file["key"]) if file.get("key") else None),
                             group_column=group_column or file.get("group_column"),
                             label_column=label_column or file.get("label_column"))
    labels_file = labels or file.get("labels")
    result = run_with_engine(ctx, config, engine, workers, engine_address, progress,
                             lambda e, r: leakage(specs, options, labels_file=str(labels_file) if labels_file else None,
                                                  engine=e, progress=r))
    typer.echo(render(result), nl=False)
    emit_reports(result, reports)
    raise typer.Exit(ExitCode.for_verdict(result.verdict))
