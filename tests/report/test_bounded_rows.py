"""Console and HTML reports stay bounded on huge results (issue 23): the failing rows first, then one line saying how
many more and where they are; ``--max-rows 0`` prints every row; the JSON report keeps everything."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from gapcheck.findings import Finding, Severity, Subject
from gapcheck.groups import ReportTargets
from gapcheck.report.contract import CONSOLE_MAX_ROWS, HTML_MAX_ROWS, SimpleResult, Table, shown_rows
from gapcheck.report.formats import ReportFormat, console_format, html_format, render
from gapcheck.report.text import MAX_CONSOLE_CHARS
from tests.cli.commands import commands, options


@dataclass(frozen=True)
class Big(SimpleResult):
    table: Table = Table("t", (), ())

    def views(self) -> tuple[Table, ...]:
        return (self.table,)


def big(rows: int, failing: tuple[int, ...]) -> Big:
    table = Table("pairs", ("row", "value"), tuple((f"r{i:06d}", i) for i in range(rows)), highlight=failing)
    findings = tuple(Finding("exact_duplicate", Severity.GAP if i in failing else Severity.WARNING, f"finding f{i:06d}",
                             subject=Subject(path=f"p{i}")) for i in range(rows))
    return Big(command="leakage", findings=findings, headline="h", table=table)


def test_the_console_prints_the_failing_rows_first_then_says_how_many_more():
    failing = (5, 4_321, 19_999)
    text = console_format.render(big(20_000, failing))
    lines = text.splitlines()
    assert len(lines) < 3 * CONSOLE_MAX_ROWS  # two bounded lists (table and findings), not 40,000 lines
    for i in failing:  # the failing rows and findings are there, whatever their place
        assert f"r{i:06d}" in text and f"f{i:06d}" in text
    assert "r000000" in text and f"r{CONSOLE_MAX_ROWS:06d}" not in text  # then the first rows in table order
    assert f"... {20_000 - CONSOLE_MAX_ROWS:,} more rows not shown (--max-rows {CONSOLE_MAX_ROWS}; --max-rows 0 " \
           "shows all); the JSON report holds every one" in lines
    assert any(line.startswith(f"... {20_000 - CONSOLE_MAX_ROWS:,} more findings not shown") for line in lines)
    assert lines[-1].startswith("GAP")


def test_max_rows_zero_prints_every_row_and_a_small_limit_is_honoured():
    result = big(300, (250,))
    every = console_format.render(result, max_rows=0)
    assert all(f"r{i:06d}" in every and f"f{i:06d}" in every for i in range(300)) and "not shown" not in every
    three = console_format.render(result, max_rows=3)
    assert [f"r{i:06d}" in three for i in (0, 1, 2, 250)] == [True, True, False, True]
    assert "... 297 more rows not shown (--max-rows 3;" in three


def test_report_targets_default_bound_and_max_rows_zero(capsys):
    result = big(CONSOLE_MAX_ROWS + 50, ())
    assert ReportTargets().max_rows == CONSOLE_MAX_ROWS
    assert "... 50 more rows not shown" in ReportTargets().console_text(result)
    assert "not shown" not in ReportTargets(max_rows=0).console_text(result)
    from rich.console import Console

    ReportTargets(max_rows=0).show(result, Console(width=200, color_system=None))
    assert f"r{CONSOLE_MAX_ROWS + 49:06d}" in capsys.readouterr().out


def test_the_html_report_holds_a_bounded_page_and_the_json_every_finding():
    rows = HTML_MAX_ROWS * 3
    result = big(rows, (rows - 1,))
    page = html_format.render(result)
    assert page.count("<tr") == 2 * (HTML_MAX_ROWS + 1)  # findings and the table: header + the bound each
    assert f"r{rows - 1:06d}" in page and f"f{rows - 1:06d}" in page  # the failing one, though last
    assert page.count(f"... {rows - HTML_MAX_ROWS:,} more") == 2
    assert len(json.loads(render(ReportFormat.JSON, result))["findings"]) == rows
    assert html_format.render(result, max_rows=0).count("<tr") == 2 * (rows + 1)


def test_a_huge_outside_value_is_clipped_on_the_console():
    table = Table("t", ("c",), (("x" * 1_000_000,),))
    finding = Finding("exact_duplicate", Severity.GAP, "m" * 1_000_000)
    text = console_format.render(Big(command="leakage", findings=(finding,), headline="h", table=table))
    assert len(text) < 4 * MAX_CONSOLE_CHARS + 2_000 and f"({1_000_000 - MAX_CONSOLE_CHARS:,} more characters)" in text


def test_shown_rows_bounds_even_when_every_row_is_highlighted():
    assert shown_rows(10, range(10), 3) == [0, 1, 2]
    assert shown_rows(10, (9, 9, -1, 42), 2) == [0, 9]
    assert shown_rows(5, (), 0) == [0, 1, 2, 3, 4]


def test_every_command_that_prints_tables_bounds_them_the_same_way():
    """Every command with report flags has --max-rows, defaulting to the one bound, 0 meaning all (said in --help)."""
    with_reports = {path: options(cmd) for path, cmd in commands() if "--json" in options(cmd)}
    assert len(with_reports) >= 10  # export-diff, preprocess-audit, leakage, drift, lint, nightly, golden, ...
    for path, opts in with_reports.items():
        assert "--max-rows" in opts, path
        param = opts["--max-rows"]
        assert param.default in (CONSOLE_MAX_ROWS, None), path  # None: the group's default applies
        assert f"default {CONSOLE_MAX_ROWS}; 0: all" in (param.help or ""), path


@pytest.mark.parametrize("argv", [("leakage", "--help"), ("lint", "--help"), ("export-diff", "--help")])
def test_help_states_the_bound(argv):
    from typer.testing import CliRunner

    from gapcheck.cli.app import app

    out = CliRunner().invoke(app, list(argv), env={"COLUMNS": "400"}).output
    assert "--max-rows" in out and f"default {CONSOLE_MAX_ROWS}; 0: all" in " ".join(out.split())


def test_one_hidden_row_is_said_in_the_singular():
    assert "... 1 more row not shown (--max-rows 3;" in console_format.render(big(4, ()), max_rows=3)


def test_huge_outside_values_are_clipped_in_the_html_page():
    rows = tuple((f"{i}" + "x" * 1_000_000,) for i in range(50))
    finding = Finding("exact_duplicate", Severity.GAP, "m" * 1_000_000, evidence={"detail": "e" * 1_000_000})
    page = html_format.render(Big(command="leakage", findings=(finding,), headline="h", table=Table("t", ("c",), rows)))
    assert len(page) < 50 * 11_000 + 50_000 and page.count("more characters)") == 52


def test_a_huge_sarif_report_is_compact_and_holds_every_result():
    many, few = big(12_000, ()), big(3, ())
    text = render(ReportFormat.SARIF, many)
    assert "\n  " not in text and len(json.loads(text)["runs"][0]["results"]) == 12_000
    assert "\n  " in render(ReportFormat.SARIF, few)  # a small one stays readable
