"""`gapcheck preprocess-audit`: parse, call :func:`gapcheck.preprocess.audit.preprocess_audit`, render, exit 0/1."""
from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from gapcheck.cli.rich_progress import RichProgress
from gapcheck.config import load_config
from gapcheck.errors import ExitCode, UsageError
from gapcheck.findings import Severity
from gapcheck.preprocess.audit import DEFAULT_TOLERANCE, preprocess_audit
from gapcheck.preprocess.distribution import DEFAULT_MIN_EFFECT
from gapcheck.preprocess.result import PreprocessAuditResult
from gapcheck.preprocess.stages import parse_stage_option
from gapcheck.report.console import make_console, print_findings, print_verdict
from gapcheck.report.json_report import write_json
from gapcheck.report.junit import JUnitCase, write_junit


def command(
    samples: Optional[Path] = typer.Option(None, "--samples", help="Folder (recursive) or file of raw samples."),
    stage: Optional[List[str]] = typer.Option(
        None, "--stage", help="NAME=module:callable or NAME=path/file.py:callable; the first is the reference."),
    augmented: Optional[List[str]] = typer.Option(
        None, "--augmented", help="Stage name whose randomness is expected (training augmentation)."),
    config: Optional[Path] = typer.Option(None, "--config", help="gapcheck.toml or pyproject.toml (default: discovered)."),
    n: Optional[int] = typer.Option(None, "--n", help="Samples to audit (default 256)."),
    p_threshold: Optional[float] = typer.Option(None, "--p-threshold", help="KS p-value threshold (default 0.01)."),
    min_effect: Optional[float] = typer.Option(None, "--min-effect", help=f"Minimum KS statistic D to flag (default {DEFAULT_MIN_EFFECT})."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Worker processes (default 2)."),
    repeats: Optional[int] = typer.Option(None, "--repeats", help="Extra runs per stage to detect nondeterminism (default 2)."),
    tolerance: Optional[float] = typer.Option(None, "--tolerance", help="Pass when max |Δ| <= this fraction of the reference range."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write a JSON report."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML report."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
) -> None:
    """Run the same raw samples through training, validation and inference preprocessing and name what differs."""
    cfg = load_config(config).preprocess
    specs = [parse_stage_option(s) for s in stage] if stage else list(cfg.stages)
    marked = set(augmented or [])
    unknown = marked - {s.name for s in specs}
    if unknown:
        raise UsageError(f"--augmented names unknown stage(s): {', '.join(sorted(unknown))}")
    specs = [type(s)(**{**s.__dict__, "augmented": s.augmented or s.name in marked}) for s in specs]
    sample_source = samples if samples is not None else cfg.samples
    if sample_source is None:
        raise UsageError("no samples: pass --samples or set [preprocess] samples in gapcheck.toml")

    def pick(cli_value, cfg_value, default):
        return cli_value if cli_value is not None else cfg_value if cfg_value is not None else default

    console = make_console()
    with RichProgress(enabled=progress) as bar:
        result = preprocess_audit(
            sample_source, specs,
            n=pick(n, cfg.n, 256), p_threshold=pick(p_threshold, cfg.p_threshold, 0.01),
            min_effect=pick(min_effect, cfg.min_effect, DEFAULT_MIN_EFFECT), workers=pick(workers, cfg.workers, 2),
            repeats=pick(repeats, cfg.repeats, 2), tolerance=pick(tolerance, cfg.tolerance, DEFAULT_TOLERANCE),
            progress=bar,
        )
    render(console, result)
    if json_path is not None:
        write_json(json_path, "preprocess-audit", result.json_payload())
    if junit_path is not None:
        write_junit(junit_path, "gapcheck.preprocess-audit", junit_cases(result))
    if html_path is not None:
        from gapcheck.report.html import write_preprocess_html

        write_preprocess_html(html_path, result)
    raise typer.Exit(ExitCode.NO_GAP if result.verdict == "pass" else ExitCode.GAP_FOUND)


def _fmt(value: float) -> str:
    return "inf" if value == math.inf else "-inf" if value == -math.inf else "nan" if math.isnan(value) else f"{value:.4g}"


def render(console, result: PreprocessAuditResult) -> None:
    """The stage table (one row per stage; cells that differ from the reference in red), pairs, findings."""
    ref = result.stages[0]
    channels = max((len(r.channel_mean) for r in result.stages), default=0)
    table = Table(title="preprocess-audit: stages", show_lines=False)
    for column in ["stage", "shape", "dtype", "range"] + [f"c{i} mean/std" for i in range(channels)] + ["resize", "samples"]:
        table.add_column(column)

    def cell(text: str, differs: bool) -> str:
        return f"[bold red]{escape(text)}[/bold red]" if differs else escape(text)

    for row in result.stages:
        cells = [escape(row.stage) + (" (augmented)" if row.augmented else ""),
                 cell(",".join(row.shapes), row.shapes != ref.shapes),
                 cell(",".join(row.dtypes), row.dtypes != ref.dtypes),
                 cell(f"[{_fmt(row.min)}, {_fmt(row.max)}]", _differs(row.min, ref.min) or _differs(row.max, ref.max))]
        for i in range(channels):
            if i < len(row.channel_mean):
                differs = i >= len(ref.channel_mean) or _differs(row.channel_mean[i], ref.channel_mean[i]) \
                    or _differs(row.channel_std[i], ref.channel_std[i])
                cells.append(cell(f"{row.channel_mean[i]:.3f}/{row.channel_std[i]:.3f}", differs))
            else:
                cells.append("")
        cells.append(cell(row.resize_method, row.resize_method != ref.resize_method))
        cells.append(f"{row.ok_samples} ok" + (f", [red]{row.failed_samples} failed[/red]" if row.failed_samples else ""))
        table.add_row(*cells)
    console.print(table)
    pairs = Table(title="pairwise, per sample")
    for column in ("pair", "samples", "max |Δ|", "min PSNR dB", "mean PSNR dB", "status"):
        pairs.add_column(column)
    for p in result.pairs:
        status = "[green]within tolerance[/green]" if p.within_tolerance else f"[red]differs[/red] {escape(p.note)}"
        pairs.add_row(escape(f"{p.ref} vs {p.cand}"), f"{p.comparable_samples}/{p.compared_samples}", _fmt(p.max_abs),
                      _fmt(p.min_psnr_db), _fmt(p.mean_psnr_db), status)
    console.print(pairs)
    print_findings(console, result.findings)
    print_verdict(console, result.verdict, result.summary)


def _differs(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) != math.isnan(b)
    return abs(a - b) > 1e-3 * max(1.0, abs(b))


def junit_cases(result: PreprocessAuditResult) -> list[JUnitCase]:
    """One case per stage pair (its root causes), per stage (errors, determinism), and one for the inputs."""
    cases = []
    for pair in result.pairs:
        where = f"{pair.cand} vs {pair.ref}"
        gaps = [f for f in result.findings if f.is_gap and f.where.startswith(where)]
        details = f"max |Δ| {_fmt(pair.max_abs)}, min PSNR {_fmt(pair.min_psnr_db)} dB over {pair.compared_samples} samples"
        cases.append(JUnitCase(name=where, classname="preprocess-audit.pairs",
                               failure="; ".join(f"{f.code}: {f.message}" for f in gaps) or None,
                               details=details))
    for row in result.stages:
        gaps = [f for f in result.findings if f.is_gap and f.code in ("stage_error", "nondeterministic")
                and (f.where == row.stage or f.where.startswith(row.stage + " @"))]
        cases.append(JUnitCase(name=row.stage, classname="preprocess-audit.stages",
                               failure="; ".join(f"{f.code}: {f.message}" for f in gaps) or None,
                               details=f"{row.ok_samples} ok, {row.failed_samples} failed"))
    inputs = [f for f in result.findings if f.severity is Severity.WARNING and f.code.endswith(("image", "input", "bomb", "readable"))]
    cases.append(JUnitCase(name="inputs", classname="preprocess-audit.inputs",
                           details="; ".join(f.message for f in inputs) or "all samples decoded"))
    return cases
