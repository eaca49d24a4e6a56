"""`gapcheck preprocess-audit`: parse, call :func:`gapcheck.preprocess.audit.preprocess_audit` (images) or
:func:`gapcheck.text.cli_bridge.run_text_audit` (text samples or ``hf:`` tokenizer stages), render, exit 0/1.

The command's own options (samples, stages, statistics) stay here; the engine and the reports are the shared groups
(:mod:`gapcheck.groups`). Values merge file < environment < flags; a flag left alone is passed as None, so the
defaults live once, in the library (``preprocess_audit``'s and ``audit_text``'s keywords, ``[text]`` resolution in
:mod:`gapcheck.text.config`). The help texts read those defaults from the library's source (see :func:`_default`).
"""
from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.cli.options import ProgressOpt
from gapcheck.errors import UsageError
from gapcheck.groups import EngineSpec, ReportTargets, check_number

_IMAGE = ("gapcheck.preprocess.audit", "preprocess_audit")
_TEXT = ("gapcheck.text.audit", "audit_text")


@functools.cache
def _default(module: str, function: str, parameter: str) -> Any:
    """The default of ``module.function``'s keyword ``parameter``, read from the module's source without importing
    it (the library modules import numpy and scipy; ``gapcheck preprocess-audit --help`` and loading the command
    must not). A default that names a module-level constant, also one imported ``from`` another gapcheck module, is
    followed to its literal. The help then says what the library does, and the value is written once."""
    try:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, module
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
        args = fn.args
        pairs = [*zip(args.kwonlyargs, args.kw_defaults, strict=True),
                 *zip(args.args[::-1], args.defaults[::-1], strict=False)]  # positional defaults are the last ones
        return _literal(tree, next(d for a, d in pairs if a.arg == parameter))
    except (OSError, SyntaxError, ValueError, LookupError, StopIteration, AssertionError):
        # no source (a frozen install) or a default that is not a literal: import the library after all
        import inspect

        return inspect.signature(getattr(importlib.import_module(module), function)).parameters[parameter].default


def _literal(tree: ast.Module, node: ast.expr | None) -> Any:
    if isinstance(node, ast.Name):
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and any(getattr(t, "id", None) == node.id for t in statement.targets):
                return _literal(tree, statement.value)
            if isinstance(statement, ast.ImportFrom) and statement.module and any(
                    (a.asname or a.name) == node.id for a in statement.names):
                name = next(a.name for a in statement.names if (a.asname or a.name) == node.id)
                spec = importlib.util.find_spec(statement.module)
                assert spec is not None and spec.origin is not None, statement.module
                other = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
                return _literal(other, ast.Name(id=name))
        raise LookupError(f"no module-level value for {node.id}")
    return ast.literal_eval(node)  # type: ignore[arg-type]


def _said(image: str, text: str | None = None) -> str:
    """``default 2; config ...``, or ``default 256 for images, 10000 for text; ...`` when the audits' defaults differ
    (``text``: the text audit's keyword when it is not ``image``; both sections spell the key as ``image``)."""
    a, b = _default(*_IMAGE, image), _default(*_TEXT, text or image)
    said = f"default {a:g}" if a == b else f"default {a:g} for images, {b:g} for text"
    return f"{said}; config: preprocess.{image}, text.{image}"


# [preprocess] workers, else preprocess_audit's own default (the engine group's --workers shows it)
PREPROCESS_WORKERS: int = _default(*_IMAGE, "workers")


@declare(use(EngineSpec, workers=PREPROCESS_WORKERS), ReportTargets, section="preprocess")
def command(
    groups: Groups,
    samples: Annotated[Optional[Path], typer.Option(
        "--samples", help="Folder (recursive) or file of raw samples; text: lines of a .txt, FILE.jsonl:field, "
        "FILE.csv:column, a folder of .txt.")] = None,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", help="NAME=module:callable, NAME=path/file.py:callable or NAME=hf:TOKENIZER[,...]; the first is "
        "the reference.")] = None,
    augmented: Annotated[Optional[list[str]], typer.Option(
        "--augmented", help="Stage name whose randomness is expected (training augmentation).")] = None,
    n: Annotated[Optional[int], typer.Option(
        "--n", "--max-samples", min=1, help=f"Samples to audit ({_said('n', 'max_samples')}).")] = None,
    p_threshold: Annotated[Optional[float], typer.Option(
        "--p-threshold", help=f"KS p-value threshold ({_said('p_threshold')}).")] = None,
    min_effect: Annotated[Optional[float], typer.Option(
        "--min-effect", help=f"Minimum KS statistic D to flag ({_said('min_effect')}).")] = None,
    repeats: Annotated[Optional[int], typer.Option(
        "--repeats", min=0, help=f"Extra runs per stage to detect nondeterminism ({_said('repeats')}).")] = None,
    range_tolerance: Annotated[Optional[float], typer.Option(
        "--range-tolerance", help="Pass when max |Δ| <= this fraction of the reference range (images).")] = None,
    # the old spelling, still accepted but hidden: everywhere else --tolerance means PATTERN=RTOL,ATOL (the tolerance
    # group), so --help shows only --range-tolerance (tests/cli/test_groups_matrix.py LEGACY)
    tolerance: Annotated[Optional[float], typer.Option(
        "--tolerance", hidden=True, help="The same as --range-tolerance (its older spelling).")] = None,
    progress: ProgressOpt = True,
) -> None:
    """Run the same raw samples through training, validation and inference preprocessing and name what differs."""
    check_number(p_threshold, "--p-threshold", low=0.0, low_open=True, high=1.0)
    check_number(min_effect, "--min-effect", high=1.0)
    tolerance = range_tolerance if range_tolerance is not None else tolerance
    check_number(tolerance, "--range-tolerance")
    # None: not given on the command line ([text] / [preprocess], then the library, decide)
    flags = {"n": n, "p_threshold": p_threshold, "min_effect": min_effect, "repeats": repeats}
    if _is_text(samples, stage or [], groups.config):
        if augmented or tolerance is not None:
            raise UsageError("--augmented and --range-tolerance are for image stages, not tokenizer stages")
        raise typer.Exit(_text_audit(groups, samples, stage or [], flags, progress))
    raise typer.Exit(_image_audit(groups, samples, stage or [], augmented or [], {**flags, "tolerance": tolerance},
                                  progress))


def _image_audit(groups: Groups, samples: Path | None, stage: list[str], augmented: list[str], flags: dict[str, Any],
                 progress: bool) -> int:
    """The image audit: flags over [preprocess] (file < environment); what neither sets is not passed, so
    ``preprocess_audit``'s own defaults apply."""
    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.preprocess.audit import preprocess_audit
    from gapcheck.preprocess.stages import parse_stage_option

    cfg = groups.config.preprocess
    sample_source = samples if samples is not None else cfg.samples
    specs = [parse_stage_option(s) for s in stage] if stage else list(cfg.stages)
    marked = set(augmented)
    unknown = marked - {s.name for s in specs}
    if unknown:
        raise UsageError(f"--augmented names unknown stage(s): {', '.join(sorted(unknown))}")
    specs = [type(s)(**{**s.__dict__, "augmented": s.augmented or s.name in marked}) for s in specs]
    if sample_source is None:
        raise UsageError("no samples: pass --samples or set [preprocess] samples (or [text] samples) in gapcheck.toml")
    settings = {k: v if v is not None else getattr(cfg, k) for k, v in flags.items()}
    engine = groups[EngineSpec]
    with RichProgress(enabled=progress) as bar, engine.open() as opened:
        result = preprocess_audit(sample_source, specs, progress=bar, engine=opened,
                                  workers=engine.workers or PREPROCESS_WORKERS,
                                  **{k: v for k, v in settings.items() if v is not None})
    return groups[ReportTargets].emit(result)


def _is_text(samples: Path | None, stages: list[str], config: Any) -> bool:
    """Text samples or ``hf:`` stages on the command line, else ``[text]`` (or a text ``[preprocess]`` source)."""
    from gapcheck.text.cli_bridge import wants_text_audit

    if samples is None and any(s.partition("=")[2].strip().startswith("hf:") for s in stages):
        return True  # tokenizer stages without samples: the text audit names what is missing
    return wants_text_audit(None if samples is None else str(samples), stages, config)


def _text_audit(groups: Groups, samples: Path | None, stages: list[str], flags: dict[str, Any], progress: bool) -> int:
    """The text audit: flags over [text] over [preprocess]'s statistics over the library's defaults (all resolved by
    :func:`gapcheck.text.config.resolve`), rendered and exited like the image path. Without --engine (flag, config
    or environment) the chunks run in this process, the text audit's own default."""
    from gapcheck.cli.rich_progress import RichProgress
    from gapcheck.text.cli_bridge import run_text_audit

    engine = groups[EngineSpec]
    chosen = groups.given.get(EngineSpec, frozenset())
    with RichProgress(enabled=progress) as bar:
        result = run_text_audit(None if samples is None else str(samples), stages, config=groups.config,
                                max_samples=flags["n"], repeats=flags["repeats"], p_threshold=flags["p_threshold"],
                                min_effect=flags["min_effect"], engine=engine.name if "name" in chosen else None,
                                workers=engine.workers, address=engine.address, progress=bar)
    return groups[ReportTargets].emit(result)
