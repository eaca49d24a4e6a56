"""`gapcheck preprocess-audit`: parse, call :func:`gapcheck.preprocess.audit.preprocess_audit` (images) or
:func:`gapcheck.text.cli_bridge.run_text_audit` (text samples or ``hf:`` tokenizer stages), render, exit 0/1.

The command's own options (samples, stages, statistics) stay here; the engine and the reports are the shared groups
(:mod:`gapcheck.groups`). Values merge file < environment < flags.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.cli.options import ProgressOpt
from gapcheck.errors import UsageError
from gapcheck.groups import EngineSpec, ReportTargets, check_number

PREPROCESS_WORKERS = 2  # [preprocess] workers, else this (the engine group's --workers)


@declare(use(EngineSpec, workers=PREPROCESS_WORKERS), ReportTargets, section="preprocess")
def command(
    groups: Groups,
    samples: Annotated[Optional[Path], typer.Option("--samples", help="Folder (recursive) or file of raw samples.")] = None,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", help="NAME=module:callable or NAME=path/file.py:callable; the first is the reference.")] = None,
    augmented: Annotated[Optional[list[str]], typer.Option(
        "--augmented", help="Stage name whose randomness is expected (training augmentation).")] = None,
    n: Annotated[Optional[int], typer.Option("--n", min=1, help="Samples to audit (default 256).")] = None,
    p_threshold: Annotated[Optional[float], typer.Option("--p-threshold", help="KS p-value threshold (default 0.01).")] = None,
    min_effect: Annotated[Optional[float], typer.Option("--min-effect", help="Minimum KS statistic D to flag.")] = None,
    repeats: Annotated[Optional[int], typer.Option(
        "--repeats", min=0, help="Extra runs per stage to detect nondeterminism (default 2).")] = None,
    range_tolerance: Annotated[Optional[float], typer.Option(
        "--range-tolerance", help="Pass when max |Δ| <= this fraction of the reference range.")] = None,
    # the old spelling, hidden: --tolerance means PATTERN=RTOL,ATOL everywhere else (the tolerance group)
    tolerance: Annotated[Optional[float], typer.Option("--tolerance", hidden=True)] = None,
    progress: ProgressOpt = True,
) -> None:
    """Run the same raw samples through training, validation and inference preprocessing and name what differs."""
    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.preprocess.audit import preprocess_audit
    from gapcheck.preprocess.stages import parse_stage_option

    check_number(p_threshold, "--p-threshold", low=0.0, low_open=True, high=1.0)
    check_number(min_effect, "--min-effect", high=1.0)
    tolerance = range_tolerance if range_tolerance is not None else tolerance
    check_number(tolerance, "--range-tolerance")
    cfg = groups.config.preprocess
    sample_source = samples if samples is not None else cfg.samples
    texts = _text_stages(stage, cfg)
    if sample_source is not None and _is_text(sample_source, texts):
        if augmented or tolerance is not None:
            raise UsageError("--augmented and --range-tolerance are for image stages, not tokenizer stages")
        flags = {"n": n, "p_threshold": p_threshold, "min_effect": min_effect, "repeats": repeats}
        settings = {k: v for k, v in {**{k: getattr(cfg, k) for k in flags}, **flags}.items() if v is not None}
        raise typer.Exit(_text_audit(groups, sample_source, texts, settings, progress))
    specs = [parse_stage_option(s) for s in stage] if stage else list(cfg.stages)
    marked = set(augmented or [])
    unknown = marked - {s.name for s in specs}
    if unknown:
        raise UsageError(f"--augmented names unknown stage(s): {', '.join(sorted(unknown))}")
    specs = [type(s)(**{**s.__dict__, "augmented": s.augmented or s.name in marked}) for s in specs]
    if sample_source is None:
        raise UsageError("no samples: pass --samples or set [preprocess] samples in gapcheck.toml")
    # file < environment < flags for the statistics; what neither sets takes preprocess_audit's own defaults
    flags = {"n": n, "p_threshold": p_threshold, "min_effect": min_effect, "repeats": repeats, "tolerance": tolerance}
    settings = {k: v for k, v in {**{k: getattr(cfg, k) for k in flags}, **flags}.items() if v is not None}
    engine = groups[EngineSpec]
    with RichProgress(enabled=progress) as bar, engine.open() as opened:
        result = preprocess_audit(sample_source, specs, progress=bar, engine=opened,
                                  workers=engine.workers or PREPROCESS_WORKERS, **settings)
    raise typer.Exit(groups[ReportTargets].emit(result))


def _text_stages(stage: list[str] | None, cfg: object) -> list[str]:
    """The stages as NAME=TARGET strings, as the text audit takes them (the flags, else [preprocess] stages)."""
    if stage:
        return list(stage)
    return [f"{s.name}={s.target}" for s in getattr(cfg, "stages", ()) if getattr(s, "target", "")]


def _is_text(samples: object, stages: list[str]) -> bool:
    from gapcheck.text.cli_bridge import is_text_audit

    return is_text_audit(str(samples), stages)


def _text_audit(groups: Groups, samples: object, stages: list[str], settings: dict, progress: bool) -> int:
    """Text samples or tokenizer stages: the text audit, rendered and exited like the image path. Without --engine
    (flag, config or environment) the chunks run in this process, the text audit's own default."""
    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.text.cli_bridge import run_text_audit

    if not stages:
        raise UsageError("no stages: pass --stage NAME=hf:PATH or NAME=module:fn (at least one)")
    engine = groups[EngineSpec]
    chosen = groups.given.get(EngineSpec, frozenset())
    with RichProgress(enabled=progress) as bar:
        result = run_text_audit(str(samples), stages, max_samples=settings.get("n"),
                                repeats=settings.get("repeats", 2), p_threshold=settings.get("p_threshold", 0.01),
                                min_effect=settings.get("min_effect", 0.1),
                                engine=engine.name if "name" in chosen else None, workers=engine.workers,
                                address=engine.address, progress=bar)
    return groups[ReportTargets].emit(result)
