"""`gapcheck leakage`: parse, call :func:`gapcheck.data.api.leakage` on the chosen engine, render, exit 0/1."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from gapcheck.cli.groups import Groups, declare
from gapcheck.errors import UsageError
from gapcheck.groups import EngineSpec, RemoteSpec, ReportTargets, check_number


def split_list(values: list[str] | None) -> tuple[str, ...] | None:
    parts = [p.strip() for v in values or () for p in v.split(",") if p.strip()]
    return tuple(parts) or None


def run_with_engine(engine: EngineSpec, progress: bool, remote: RemoteSpec, call):  # type: ignore[no-untyped-def]
    """Open the engine the group describes with the remote read settings applied (its workers inherit them), run
    ``call(engine, reporter)``, always close the engine."""
    from gapcheck.cli.rich_progress import RichProgress

    with remote.applied(), RichProgress(enabled=progress) as reporter, engine.open() as opened:
        return call(opened, reporter)


def reports_beside_globs(reports: ReportTargets, locations: list[tuple[str, str]]) -> ReportTargets:
    """The report group re-checked with every file the splits' local globs match as an input (the one resolve path
    hands it literal paths only): no report replaces a file a glob reads, and none is written where the glob would
    read it on the next run. ``locations``: (flag, location) pairs."""
    import dataclasses
    import fnmatch
    import os

    from gapcheck.data.sources import glob_matches

    matched = tuple((flag, Path(match)) for flag, location in locations for match in glob_matches(location) or ())
    if matched:
        reports = dataclasses.replace(reports, inputs=(*reports.inputs, *matched))  # re-validated: exit 2 now
    for fmt, path in reports.paths().items():
        for flag, location in locations:
            pattern = os.path.abspath(location)
            if glob_matches(location) is not None and fnmatch.fnmatch(os.path.abspath(path), pattern):
                raise UsageError(f"--{fmt} report path {path} matches {flag} {location}: the next run would read the "
                                 "report as data; give a path outside the glob")
    return reports


ProgressFlag = Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars on stderr.")]


@declare(EngineSpec, RemoteSpec, ReportTargets, section="leakage")
def command(
    groups: Groups,
    split: Annotated[list[str], typer.Option("--split", help="name=location (folder, file, glob, fsspec URL or "
                                                             "pkg.module:dataset). Two or more.")],
    labels: Annotated[Optional[Path], typer.Option("--labels", help="CSV with path,label[,group] for image splits.")] = None,
    near: Annotated[Optional[float], typer.Option("--near", help="Near-duplicate similarity in [0, 1] (0.9, the "
                                                  "default: ≤ 6 of 64 pHash bits differ).")] = None,
    key: Annotated[Optional[list[str]], typer.Option("--key", help="Key columns for table rows (comma list).")] = None,
    group_column: Annotated[Optional[str], typer.Option("--group-column", help="Group id column (patient, user).")] = None,
    label_column: Annotated[Optional[str], typer.Option("--label-column", help="Label column of table splits.")] = None,
    columns: Annotated[Optional[list[str]], typer.Option("--columns", help="Column names of .npy/.npz matrices.")] = None,
    within: Annotated[Optional[bool], typer.Option("--within/--no-within", help="Search every split (or none) for "
                                                   "duplicates inside itself. Default: validation/test splits.")] = None,
    within_split: Annotated[Optional[list[str]], typer.Option("--within-split", help="Search only this split for "
                                                              "duplicates inside itself (repeatable).")] = None,
    progress: ProgressFlag = False,
) -> None:
    """Find samples shared across splits: exact and near duplicates, group overlap, label conflicts, target leakage."""
    import gapcheck.data.config  # noqa: F401 - registers [leakage], [drift]
    from gapcheck.data.api import leakage
    from gapcheck.data.leakage import LeakageOptions
    from gapcheck.data.sources import SourceSpec, parse_split
    from gapcheck.report.formats.console_format import render

    check_number(near, "--near", high=1.0)
    file = groups.config.section("leakage")
    names = split_list(columns)
    specs = [SourceSpec(s.name, s.location, names) for s in map(parse_split, split)]
    options = LeakageOptions(near=first_given(near, file.near, LeakageOptions.near),
                             key_columns=split_list(key) or (tuple(file.key) if file.key else None),
                             group_column=group_column or file.group_column,
                             label_column=label_column or file.label_column,
                             within=within_choice(within, within_split, file.within))
    labels_file = labels or file.labels
    reports = reports_beside_globs(groups[ReportTargets], [(f"--split {s.name}", s.location) for s in specs])
    result = run_with_engine(groups[EngineSpec], progress, groups[RemoteSpec],
                             lambda e, r: leakage(specs, options, labels_file=str(labels_file) if labels_file else None,
                                                  engine=e, progress=r))
    if not reports.json_on_stdout:
        typer.echo(render(result), nl=False)
    raise typer.Exit(reports.emit_files(result))


def within_choice(flag: bool | None, names: list[str] | None,
                  configured: bool | list[str] | None) -> bool | tuple[str, ...] | None:
    """--within-split names, else --within/--no-within, else the config file; None keeps the by-name default."""
    if names and flag is not None:
        raise UsageError("give --within/--no-within or --within-split, not both", parameter="within")
    if names:
        return split_list(names)
    chosen = flag if flag is not None else configured
    return tuple(chosen) if isinstance(chosen, list) else chosen


def first_given(*values):  # type: ignore[no-untyped-def]
    """Flag, then config, then the library's default."""
    return next(v for v in values if v is not None)
