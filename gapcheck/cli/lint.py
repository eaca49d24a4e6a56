"""`gapcheck lint`: parse, call :func:`gapcheck.lint.lint_paths`, render, exit 0 clean / 1 findings / 2 errors.

Declared from :class:`~gapcheck.groups.ReportTargets` like every command that writes reports (``--json/--junit/
--html/--sarif/--max-rows``, ``--json -`` for JSON on stdout, checked before any work, written atomically, the exit
code from the result). Lint's own: ``--format`` (text, json, sarif, junit) on stdout or ``--output``.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gapcheck.cli.groups import Groups, declare
from gapcheck.errors import ExitCode, UsageError
from gapcheck.groups import ReportTargets

if TYPE_CHECKING:
    from gapcheck.lint.result import LintResult


class LintFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    junit = "junit"


@dataclass(frozen=True)
class LintPath:
    """A file or folder to lint. Not a bare ``Path`` on purpose: the groups' resolution treats every path a command
    names as an input no report may lie inside, but a linted folder is only read, and a report beside the code
    (``gapcheck lint . --sarif gapcheck.sarif``, again in the next CI run) is fine. Lint hands the reports the
    precise inputs instead (:func:`linted`): each file given, and each existing source file a folder walk lints."""

    path: Path

    @classmethod
    def parse(cls, text: str) -> LintPath:
        if isinstance(text, str) and not text.strip():  # Path("") is ".": `lint ""` linted the whole working folder
            raise ValueError("an empty path: name a file or folder")
        return cls(Path(text))


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def render(result: LintResult, fmt: LintFormat, max_rows: int = 0) -> str:
    """The report as text in ``fmt`` (text is lint's own; the others are the shared format modules)."""
    from gapcheck.report.formats import ReportFormat
    from gapcheck.report.formats import render as render_format

    if fmt is LintFormat.text:
        from gapcheck.lint.text import render as render_text

        return render_text(result, max_rows=max_rows)
    return render_format(ReportFormat(fmt.value), result)


def linted(paths: list[Path], outputs: list[Path]) -> tuple[tuple[str, Path], ...]:
    """The linted paths an output must not be: each file given, and each output that is an existing source file
    (*.py, *.ipynb) inside a given folder (the walk lints it; a report beside the code, ``out/report.sarif``, is fine)."""
    read = [("the linted path", Path(p)) for p in paths if not Path(p).is_dir()]
    for folder in (Path(p) for p in paths if Path(p).is_dir()):
        read += [("the linted path", out) for out in outputs if out.suffix in (".py", ".ipynb") and out.is_file()
                 and Path(os.path.realpath(out)).is_relative_to(os.path.realpath(folder))]
    return tuple(read)


def _checked(reports: ReportTargets, paths: list[Path], output: Path | None, fmt: LintFormat) -> ReportTargets:
    """The report group re-checked against what lint reads, and ``--output`` checked like a report (exit 2, before
    any work)."""
    from gapcheck.atomic import check_not_input
    from gapcheck.report.formats import check_writable

    outputs = [p for p in (output, *reports.paths().values()) if p is not None]
    read = linted(paths, outputs)
    if output is not None:
        check_writable(output, what="--output report")
        others = tuple(pair for pair in reports.inputs if pair[0] != "--output")  # --config, from the resolution
        check_not_input(output, "--output report", read + others + tuple((f"--{k}", v) for k, v in reports.paths().items()))
    elif reports.json_on_stdout and fmt not in (LintFormat.text, LintFormat.json):
        raise UsageError(f"--json - and --format {fmt.value} both write to stdout; give --output for one of them")
    return dataclasses.replace(reports, inputs=(*reports.inputs, *read))  # replace() re-runs the check


def command(
    groups: Groups,
    paths: Annotated[list[LintPath] | None, typer.Argument(
        parser=LintPath.parse, metavar="PATH",
        help="Files and folders to lint (folders: every *.py and *.ipynb).")] = None,
    select: Annotated[list[str], typer.Option("--select", help="Codes or prefixes to run, e.g. GC1,GC201 (repeatable).")] = [],  # noqa: B006
    ignore: Annotated[list[str], typer.Option("--ignore", help="Codes or prefixes to skip (repeatable).")] = [],  # noqa: B006
    exclude: Annotated[list[str], typer.Option(
        "--exclude", help="Glob of paths not to lint when walking folders, e.g. '*.ipynb' (repeatable; adds to "
        "\\[lint] exclude).")] = [],  # noqa: B006
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
) -> None:
    """Static checks for training code: leakage, DDP, AMP, evaluation, data loading, seeds, HPO, hygiene."""
    if explain is not None:
        from gapcheck.cli.explain import command as explain_command

        explain_command(code=explain, list_all=False)
        raise typer.Exit(ExitCode.NO_GAP)
    if not paths:
        raise UsageError("give files or folders to lint (e.g. gapcheck lint train.py src/)")
    from gapcheck.codes import all_codes
    from gapcheck.lint import LintSection, lint_paths, make_selection

    targets = [t.path for t in paths]
    reports = _checked(groups[ReportTargets], targets, output, fmt)
    section = groups.config.section("lint")
    assert isinstance(section, LintSection)
    known = tuple(c.code for c in all_codes() if c.family == "lint")
    selection = make_selection(section, select=_split(select), ignore=_split(ignore), known=known,
                               target_torch=target_torch)
    excluded = [*section.exclude, *_split(exclude)]
    if diff or fix:
        from gapcheck.lint.fix import fix_paths

        fixes, result = fix_paths(targets, selection, exclude=excluded, jobs=jobs or section.jobs, write=fix and not diff)
        if diff:
            sys.stdout.write("".join(f.diff() for f in fixes))
            typer.echo(f"{sum(f.fixed for f in fixes)} fix(es) in {len(fixes)} file(s) (nothing written).", err=True)
            raise typer.Exit(ExitCode.GAP_FOUND if fixes else ExitCode.NO_GAP)
        typer.echo(f"Fixed {sum(f.fixed for f in fixes)} finding(s) in {len(fixes)} file(s).", err=True)
    else:
        result = lint_paths(targets, selection, exclude=excluded, jobs=jobs or section.jobs)
    raise typer.Exit(_emit(result, reports, fmt, output, exit_zero))


def _emit(result: LintResult, reports: ReportTargets, fmt: LintFormat, output: Path | None, exit_zero: bool) -> int:
    """The --format report (stdout or --output), the report files, the summary on stderr; the exit code."""
    if output is not None:
        from gapcheck.report.formats import write_atomic

        write_atomic(output, render(result, fmt, 0))  # a file holds every finding; --max-rows bounds the terminal
    if output is None and not reports.json_on_stdout:
        sys.stdout.write(render(result, fmt, reports.max_rows))
        sys.stdout.flush()
    code = reports.emit_files(result)  # --json - on stdout, the files, the result's exit code
    if output is not None or fmt is not LintFormat.text or reports.json_on_stdout:
        from gapcheck.lint.text import summary

        typer.echo("\n".join(summary(result)), err=True)
    return ExitCode.NO_GAP if exit_zero and code == ExitCode.GAP_FOUND else code


command = declare(ReportTargets, section="lint")(command)
