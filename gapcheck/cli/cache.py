"""`gapcheck cache info|prune|clear`: the export cache folder — what it holds, trimmed to its cap, or emptied.

The folder and the cap come from the same group as every exporting command's (``--cache-dir``, ``--cache-max-mb``,
``[cache] dir`` / ``max_mb``, ``$GAPCHECK_CACHE_DIR``). Only files named like cache entries are ever removed.
"""
from __future__ import annotations

from pathlib import Path

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.groups import ExportSpec

app = typer.Typer(name="cache", help="Show, trim or empty the export cache.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
CACHE = use(ExportSpec, skip=("exporter", "opset", "no_cache", "save_onnx"))


def _folder(spec: ExportSpec) -> tuple[Path, int]:
    from gapcheck.model.cache import DEFAULT_MAX_MB, default_cache_dir

    return (Path(spec.cache_dir) if spec.cache_dir else default_cache_dir(),
            (spec.cache_max_mb or DEFAULT_MAX_MB) * 1024 * 1024)


@app.command("info")
@declare(CACHE, section="cache")
def info(groups: Groups) -> None:
    """The folder, its entries, their size and the cap."""
    from gapcheck.model.cache import info as cache_info

    folder, cap = _folder(groups[ExportSpec])
    for line in cache_info(folder, cap).lines():
        typer.echo(line)


@app.command("prune")
@declare(CACHE, section="cache")
def prune(groups: Groups) -> None:
    """Remove the least recently used entries until the rest fit in the cap (and incomplete leftovers)."""
    from gapcheck.model.cache import prune as cache_prune

    folder, cap = _folder(groups[ExportSpec])
    removed, freed = cache_prune(folder, cap)
    typer.echo(f"removed {removed} entr{'y' if removed == 1 else 'ies'}, {freed / 1024**2:.1f} MB freed ({folder})")


@app.command("clear")
@declare(CACHE, section="cache")
def clear(groups: Groups) -> None:
    """Remove every entry."""
    from gapcheck.model.cache import clear as cache_clear

    folder, _ = _folder(groups[ExportSpec])
    removed, freed = cache_clear(folder)
    typer.echo(f"removed {removed} entr{'y' if removed == 1 else 'ies'}, {freed / 1024**2:.1f} MB freed ({folder})")
