"""`gapcheck preprocess-audit`: parse, call :func:`gapcheck.preprocess.audit.preprocess_audit`, render, exit 0/1.

The command's own options (samples, stages, statistics) stay here; reports, progress and config come
from the shared groups in :mod:`gapcheck.cli.options`. Values merge file < environment < flags.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from gapcheck.cli.leakage import AddressOpt, EngineOpt
from gapcheck.cli.options import ConfigOpt, HtmlOpt, JsonOpt, JunitOpt, MaxRowsOpt, ProgressOpt, emit_reports, prepare_reports
from gapcheck.errors import ExitCode, UsageError

_DEFAULTS = {"n": 256, "p_threshold": 0.01, "workers": 2, "repeats": 2}


def command(
    samples: Annotated[Optional[Path], typer.Option("--samples", help="Folder (recursive) or file of raw samples.")] = None,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", help="NAME=module:callable or NAME=path/file.py:callable; the first is the reference.")] = None,
    augmented: Annotated[Optional[list[str]], typer.Option(
        "--augmented", help="Stage name whose randomness is expected (training augmentation).")] = None,
    config: ConfigOpt = None,
    n: Annotated[Optional[int], typer.Option("--n", min=1, help="Samples to audit (default 256).")] = None,
    p_threshold: Annotated[Optional[float], typer.Option("--p-threshold", help="KS p-value threshold (default 0.01).")] = None,
    min_effect: Annotated[Optional[float], typer.Option("--min-effect", help="Minimum KS statistic D to flag.")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Worker processes (default 2).")] = None,
    engine: EngineOpt = None,
    engine_address: AddressOpt = None,
    repeats: Annotated[Optional[int], typer.Option(
        "--repeats", min=0, help="Extra runs per stage to detect nondeterminism (default 2).")] = None,
    tolerance: Annotated[Optional[float], typer.Option(
        "--tolerance", help="Pass when max |Δ| <= this fraction of the reference range.")] = None,
    json_path: JsonOpt = None,
    junit_path: JunitOpt = None,
    html_path: HtmlOpt = None,
    max_rows: MaxRowsOpt = 0,
    progress: ProgressOpt = True,
) -> None:
    """Run the same raw samples through training, validation and inference preprocessing and name what differs."""
    import gapcheck.data.config  # noqa: F401 - registers the [engine] section
    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.config import load_config, merge_flags
    from gapcheck.engines import EngineKind, open_engine
    from gapcheck.preprocess.audit import DEFAULT_TOLERANCE, preprocess_audit
    from gapcheck.preprocess.distribution import DEFAULT_MIN_EFFECT
    from gapcheck.preprocess.stages import parse_stage_option

    reports = prepare_reports(json=json_path, junit=junit_path, html=html_path)
    loaded = load_config(config)
    cfg = loaded.preprocess
    specs = [parse_stage_option(s) for s in stage] if stage else list(cfg.stages)
    marked = set(augmented or [])
    unknown = marked - {s.name for s in specs}
    if unknown:
        raise UsageError(f"--augmented names unknown stage(s): {', '.join(sorted(unknown))}")
    specs = [type(s)(**{**s.__dict__, "augmented": s.augmented or s.name in marked}) for s in specs]
    sample_source = samples if samples is not None else cfg.samples
    if sample_source is None:
        raise UsageError("no samples: pass --samples or set [preprocess] samples in gapcheck.toml")
    defaults = {**_DEFAULTS, "min_effect": DEFAULT_MIN_EFFECT, "tolerance": DEFAULT_TOLERANCE}
    chosen = {**defaults, **{k: v for k, v in cfg.__dict__.items() if k in defaults and v is not None}}
    settings = merge_flags(None, {**chosen, **{k: v for k, v in dict(
        n=n, p_threshold=p_threshold, min_effect=min_effect, workers=workers, repeats=repeats,
        tolerance=tolerance).items() if v is not None}})
    section = loaded.section("engine")  # flags win over the [engine] section
    kind = engine or EngineKind(getattr(section, "name", None) or "local")
    options: dict[str, Any] = {"workers": settings["workers"]}
    address = engine_address or getattr(section, "address", None)
    if address is not None:
        options["address"] = address
    with RichProgress(enabled=progress) as bar, open_engine(kind, **options) as opened:
        result = preprocess_audit(sample_source, specs, progress=bar, engine=opened, **settings)
    _report(result, reports, max_rows)
    raise typer.Exit(ExitCode.for_verdict(result.verdict))


def _report(result: Any, reports: Any, max_rows: int) -> None:
    from gapcheck.report.console import make_console
    from gapcheck.report.formats.console_format import print_result

    print_result(make_console(), result, max_rows=max_rows or None)
    emit_reports(result, reports)
