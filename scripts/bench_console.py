"""Benchmark the console and HTML reports on a synthetic result with a 100k-row table and 100k findings (issue 23):
the bounded defaults (console --max-rows 100, HTML 1,000 rows) side by side with every row (--max-rows 0, the
earlier default). Printing every row to the console is linear in the rows (rich lays out each one), so by default it
is measured on ``--all-rows`` rows and extrapolated to ``--rows``; ``--all-rows 0`` measures it on all of them.

    .venv/bin/python scripts/bench_console.py --rows 100000
    .venv/bin/python scripts/bench_console.py --rows 100000 --all-rows 0   # minutes
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

from gapcheck.findings import Finding, Severity, Subject
from gapcheck.report.contract import Check, SimpleResult, Table, findings_checks


@dataclass(frozen=True)
class _Result(SimpleResult):
    table: Table = Table("t", (), ())

    def views(self) -> tuple[Table, ...]:
        return (self.table,)

    def checks(self) -> list[Check]:
        return findings_checks(self.command, self.findings)


def synthetic(rows: int) -> _Result:
    """A leakage-like result: ``rows`` duplicate pairs (every 7th highlighted) and as many findings."""
    cells = tuple((f"data/train/{i:06d}.png", f"data/test/{i:06d}.png", i % 64, i * 1e-3, "exact" if i % 7 else "near")
                  for i in range(rows))
    table = Table("duplicate pairs", ("train", "test", "distance", "score", "kind"), cells,
                  highlight=tuple(range(0, rows, 7)))
    findings = tuple(Finding("exact_duplicate", Severity.GAP if i % 7 == 0 else Severity.WARNING,
                             f"a sample of train is in test ({i})", evidence={"distance": i % 64},
                             subject=Subject(path=f"data/train/{i:06d}.png")) for i in range(rows))
    return _Result(command="leakage", findings=findings, headline=f"{rows} pairs", table=table)


def timed(call: Callable[[], str]) -> tuple[float, int]:
    start = time.perf_counter()
    text = call()
    return time.perf_counter() - start, len(text)


def main() -> None:
    from gapcheck.report.formats import console_format, html_format

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--all-rows", type=int, default=5_000, help="rows for the every-row console run (0: --rows)")
    args = parser.parse_args()
    result = synthetic(args.rows)
    sample = synthetic(args.all_rows) if 0 < args.all_rows < args.rows else result
    scale = args.rows / len(sample.table.rows)

    bounded, bounded_chars = timed(lambda: console_format.render(result))
    every, every_chars = timed(lambda: console_format.render(sample, max_rows=0))
    html_bounded, html_chars = timed(lambda: html_format.render(result))
    html_every, html_every_chars = timed(lambda: html_format.render(result, max_rows=0))
    note = "" if scale == 1 else f" (measured on {len(sample.table.rows):,} rows, x{scale:.0f})"
    print(f"{args.rows:,} table rows + {args.rows:,} findings")
    print(f"console, every row : {every * scale:9.2f} s  {every_chars * scale / 1e6:8.1f} MB{note}")
    print(f"console, default   : {bounded:9.3f} s  {bounded_chars / 1e6:8.3f} MB  -> {every * scale / bounded:,.0f}x faster")
    print(f"HTML, every row    : {html_every:9.2f} s  {html_every_chars / 1e6:8.1f} MB")
    print(f"HTML, default      : {html_bounded:9.3f} s  {html_chars / 1e6:8.3f} MB  -> {html_every / html_bounded:,.0f}x "
          f"faster, {html_every_chars / html_chars:,.0f}x smaller")
    from gapcheck.report.formats import ReportFormat, render

    for fmt in (ReportFormat.JSON, ReportFormat.JUNIT, ReportFormat.SARIF):  # these keep every row and finding
        seconds, chars = timed(lambda fmt=fmt: render(fmt, result))
        print(f"{fmt.value + ', every finding':19}: {seconds:9.2f} s  {chars / 1e6:8.1f} MB")


if __name__ == "__main__":
    main()
