"""`gapcheck leakage`: parse, call :func:`gapcheck.data.api.leakage` on the chosen engine, render, exit 0/1."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gapcheck.cli.groups import Groups, declare
from gapcheck.errors import UsageError
from gapcheck.groups import EngineSpec, RemoteSpec, ReportTargets
from gapcheck.groups.data import LeakageSpec


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
            folder = _local_folder(location)
            if folder is not None and Path(os.path.realpath(path)).is_relative_to(folder):
                raise UsageError(f"--{fmt} report path {path} is inside {flag} {location}, a folder the split reads: "
                                 "the next run would read the report as data; give a path outside the folder")
    return reports


def _local_folder(location: str) -> Path | None:
    """The real path of a location that is a local folder now (a folder split reads every file under it)."""
    import os

    path = location[len("file://"):] if location.startswith("file://") else location
    if "://" in path or "::" in path or not os.path.isdir(path):
        return None
    return Path(os.path.realpath(path))


ProgressFlag = Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars on stderr.")]


@declare(EngineSpec, RemoteSpec, LeakageSpec, ReportTargets, section="leakage")
def command(
    groups: Groups,
    split: Annotated[list[str], typer.Option("--split", help="name=location (folder, file, glob, fsspec URL or "
                                                             "pkg.module:dataset). Two or more.")],
    progress: ProgressFlag = False,
) -> None:
    """Find samples shared across splits: exact and near duplicates, group overlap, label conflicts, target leakage."""
    from gapcheck.data.api import leakage
    from gapcheck.data.leakage import LeakageOptions
    from gapcheck.data.sources import SourceSpec, parse_split

    spec = groups[LeakageSpec]
    specs = [SourceSpec(s.name, s.location, spec.columns or None) for s in map(parse_split, split)]
    labels = str(spec.labels) if spec.labels else None
    options = LeakageOptions.from_spec(spec)
    reports = reports_beside_globs(groups[ReportTargets], [(f"--split {s.name}", s.location) for s in specs])
    result = run_with_engine(groups[EngineSpec], progress, groups[RemoteSpec],
                             lambda e, r: leakage(specs, options, labels_file=labels, engine=e, progress=r))
    if not reports.json_on_stdout:
        typer.echo(reports.console_text(result), nl=False)
    raise typer.Exit(reports.emit_files(result))


