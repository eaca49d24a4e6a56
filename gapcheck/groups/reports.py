"""``ReportTargets``: the report files (checked before any work, written atomically after it), the console's row
limit, and the one verdict -> exit code line."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from gapcheck.errors import ExitCode, UsageError
from gapcheck.groups.base import Group, Opt
from gapcheck.report.contract import CONSOLE_MAX_ROWS

if TYPE_CHECKING:
    from gapcheck.report.contract import CommandResult

STDOUT = Path("-")


@dataclass(frozen=True)
class ReportTargets(Group):
    json: Path | None = None
    junit: Path | None = None
    html: Path | None = None
    sarif: Path | None = None
    max_rows: int = CONSOLE_MAX_ROWS
    # (flag, path) of the command's inputs (set by the one resolve path, or a library caller): no report may be one
    # or lie inside one. Not an option: what the command reads, not how it reports.
    inputs: tuple[tuple[str, Path], ...] = ()

    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("json", "--json", "Write the JSON report here ('-': print it on stdout instead of the tables).",
            Optional[Path], metavar="PATH"),
        Opt("junit", "--junit", "Write a JUnit XML report here.", Optional[Path]),
        Opt("html", "--html", "Write a self-contained HTML report here.", Optional[Path]),
        Opt("sarif", "--sarif", "Write a SARIF 2.1.0 report here.", Optional[Path]),
        Opt("max_rows", "--max-rows", f"Rows of each console table, and findings, to print: the failing ones first, "
            f"then a line saying how many more (default {CONSOLE_MAX_ROWS}; 0: all). The JSON report holds every "
            "row.", int, low=0, high=10**9, metavar="N"),
    )

    def check(self) -> None:
        """Every path checked now (UsageError, exit 2, before any work); two formats may not share a file, and none
        may be (or lie inside) one of the command's inputs."""
        from gapcheck.atomic import check_not_input, check_writable

        seen: dict[Path, str] = {}
        for fmt, path in self.paths().items():
            flag = f"--{fmt}"
            check_writable(path, what=f"{flag} report")
            check_not_input(path, f"{flag} report", self.inputs)
            key = Path(path).resolve()
            if key in seen:
                raise UsageError(f"{seen[key]} and {flag} name the same file {path}")
            seen[key] = flag

    def paths(self) -> dict[str, Path]:
        """Format name -> file, for the formats asked for (``--json -`` is stdout, not a file)."""
        given = {"json": self.json, "junit": self.junit, "html": self.html, "sarif": self.sarif}
        return {fmt: Path(p) for fmt, p in given.items() if p is not None and Path(p) != STDOUT}

    @property
    def json_on_stdout(self) -> bool:
        return self.json is not None and Path(self.json) == STDOUT

    def write(self, result: CommandResult) -> list[Path]:
        """Every asked-for report, atomically (after the work)."""
        from gapcheck.report.formats import ReportFormat, write_report

        return [write_report(ReportFormat(fmt), path, result) for fmt, path in self.paths().items()]

    def show(self, result: CommandResult, console: Any = None) -> None:
        """The console tables (or, with ``--json -``, the JSON report alone on stdout)."""
        if self.json_on_stdout:
            _print_json(result)
            return
        from gapcheck.report.console import make_console
        from gapcheck.report.formats.console_format import print_result

        print_result(console or make_console(), result, max_rows=self.max_rows)

    def console_text(self, result: CommandResult) -> str:
        """The console report as plain text, bounded by ``--max-rows`` like :meth:`show` (for commands that echo it)."""
        from gapcheck.report.formats.console_format import render

        return render(result, max_rows=self.max_rows)

    def emit(self, result: CommandResult, console: Any = None) -> int:
        """Show, write, and return the exit code."""
        self.show(result, console)
        self.write(result)
        return exit_code(result)

    def emit_files(self, result: CommandResult) -> int:
        """For a command that prints its own text: the JSON on stdout if asked (``--json -``), the files, the exit code."""
        if self.json_on_stdout:
            _print_json(result)
        self.write(result)
        return exit_code(result)


def _print_json(result: Any) -> None:
    import sys

    from gapcheck.report.formats import ReportFormat, render

    sys.stdout.write(render(ReportFormat.JSON, result))
    sys.stdout.flush()


def exit_code(result: Any) -> int:
    """THE verdict -> exit code line: a result that knows a finer code (nightly: 3 for an unreachable endpoint) says
    it; otherwise 0 for a pass, 1 for a gap."""
    own = getattr(result, "exit_code", None)
    return int(own) if own is not None else int(ExitCode.for_verdict(result.verdict))
