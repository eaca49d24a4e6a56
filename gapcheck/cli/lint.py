"""`gapcheck lint`: parse, call :func:`gapcheck.lint.lint_paths`, render, exit 0 clean / 1 findings / 2 errors."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from gapcheck.cli.options import (
    ConfigOpt,
    HtmlOpt,
    JsonOpt,
    JunitOpt,
    SarifOpt,
    emit_reports,
    prepare_reports,
)
from gapcheck.errors import ExitCode, UsageError


class LintFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    junit = "junit"


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def render(result, fmt: LintFormat) -> str:  # type: ignore[no-untyped-def]
    """The report as text in ``fmt`` (text is lint's own; the others are the shared format modules)."""
    from gapcheck.report.formats import ReportFormat
    from gapcheck.report.formats import render as render_format

    if fmt is LintFormat.text:
        from gapcheck.lint.text import render as render_text

        return render_text(result)
    return render_format(ReportFormat(fmt.value), result)


def _linted(paths: list[Path], outputs: list[Path]) -> tuple[tuple[str, Path], ...]:
    """The linted paths an output must not be: each file given, and each output that is an existing source file
    (*.py, *.ipynb) inside a given folder (the walk lints it; a report beside the code, ``out/report.sarif``, is fine)."""
    read = [("the linted path", Path(p)) for p in paths if not Path(p).is_dir()]
    for folder in (Path(p) for p in paths if Path(p).is_dir()):
        read += [("the linted path", out) for out in outputs if out.suffix in (".py", ".ipynb") and out.is_file()
                 and Path(os.path.realpath(out)).is_relative_to(os.path.realpath(folder))]
    return tuple(read)


def command(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Files and folders to lint (folders: every *.py and *.ipynb).")] = None,
    select: Annotated[list[str], typer.Option("--select", help="Codes or prefixes to run, e.g. GC1,GC201 (repeatable).")] = [],  # noqa: B006
    ignore: Annotated[list[str], typer.Option("--ignore", help="Codes or prefixes to skip (repeatable).")] = [],  # noqa: B006
    exclude: Annotated[list[str], typer.Option(
        "--exclude", help="Glob of paths not to lint when walking folders, e.g. '*.ipynb' (repeatable; adds to "
        "[lint] exclude).")] = [],  # noqa: B006
    target_torch: Annotated[str | None, typer.Option(
        "--target-torch", help="The oldest torch the code runs on, e.g. 2.6 (default: the project's declared torch "
        "requirement in pyproject.toml / requirements*.txt / setup.cfg / setup.py).")] = None,
    fmt: Annotated[LintFormat, typer.Option("--format", help="Output format on stdout (or in --output).")] = LintFormat.text,
    output: Annotated[Path | None, typer.Option("--output", "-o",
                                                help="Write the --format report here instead of stdout.")] = None,
    exit_zero: Annotated[bool, typer.Option("--exit-zero", help="Exit 0 even when there are findings.")] = False,
    fix: Annotated[bool, typer.Option("--fix", help="Rewrite the mechanical findings in place (GC305 deprecated AMP "
                                      "APIs, GC801 torch.load without weights_only), then report what is left.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Print the --fix rewrites as a unified diff and change nothing "
                                       "(exit 1 when there is something to fix).")] = False,
    explain: Annotated[str | None, typer.Option("--explain", help="Explain a code (e.g. GC101) and exit.")] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, max=256, help="Worker processes (default: CPUs).")] = None,
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
    sarif_path: SarifOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Static checks for training code: leakage, DDP, AMP, evaluation, data loading, seeds, HPO, hygiene."""
    if explain is not None:
        from gapcheck.cli.explain import command as explain_command

        explain_command(code=explain, list_all=False)
        raise typer.Exit(ExitCode.NO_GAP)
    if not paths:
        raise UsageError("give files or folders to lint (e.g. gapcheck lint train.py src/)")
    from gapcheck.atomic import check_not_input
    from gapcheck.codes import all_codes
    from gapcheck.config import load_config
    from gapcheck.lint import LintSection, lint_paths, make_selection
    from gapcheck.report.formats import check_writable

    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path, sarif=sarif_path)
    # no report replaces a linted file, the config or the --output report (a report in a linted folder is fine)
    outputs = [p for p in (output, *reports.paths().values()) if p is not None]
    read = _linted(paths, outputs) + ((("--config", config),) if config is not None else ())
    if output is not None:
        check_writable(output, what="--output report")
        check_not_input(output, "--output report", read)
    reports = replace(reports, inputs=read + ((("--output", output),) if output is not None else ()))
    section = load_config(config).section("lint")
    assert isinstance(section, LintSection)
    known = tuple(c.code for c in all_codes() if c.family == "lint")
    selection = make_selection(section, select=_split(select), ignore=_split(ignore), known=known,
                               target_torch=target_torch)
    excluded = [*section.exclude, *_split(exclude)]
    if diff or fix:
        from gapcheck.lint.fix import fix_paths

        fixes, result = fix_paths(paths, selection, exclude=excluded, jobs=jobs or section.jobs, write=fix and not diff)
        if diff:
            sys.stdout.write("".join(f.diff() for f in fixes))
            typer.echo(f"{sum(f.fixed for f in fixes)} fix(es) in {len(fixes)} file(s) (nothing written).", err=True)
            raise typer.Exit(ExitCode.GAP_FOUND if fixes else ExitCode.NO_GAP)
        typer.echo(f"Fixed {sum(f.fixed for f in fixes)} finding(s) in {len(fixes)} file(s).", err=True)
    else:
        result = lint_paths(paths, selection, exclude=excluded, jobs=jobs or section.jobs)
    text = render(result, fmt)
    if output is not None:
        from gapcheck.report.formats import write_atomic

        write_atomic(output, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    emit_reports(result, reports)
    if output is not None or fmt is not LintFormat.text:
        from gapcheck.lint.text import summary

        typer.echo("\n".join(summary(result)), err=True)
    if result.errors:
        raise typer.Exit(ExitCode.USAGE)
    raise typer.Exit(ExitCode.NO_GAP if exit_zero or result.verdict == "pass" else ExitCode.GAP_FOUND)
