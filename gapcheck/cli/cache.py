"""`gapcheck cache info|prune|clear`: the export cache folder — what it holds, trimmed to its cap, or emptied.

The folder and the cap come from the same group as every exporting command's (``--cache-dir``, ``--cache-max-mb``,
``[cache] dir`` / ``max_mb``, ``$GAPCHECK_CACHE_DIR``). Only files named like cache entries are ever removed. How
an entry is checked before use (digest, links, owners) is :mod:`gapcheck.model.cache`'s docstring.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import typer

from gapcheck.cli.groups import Groups, declare, use
from gapcheck.errors import UsageError
from gapcheck.groups import ExportSpec
from gapcheck.report.text import safe_line

_META_MAX_BYTES = 64 * 1024  # an entry's description is a few hundred bytes

app = typer.Typer(name="cache", help="Show, trim or empty the export cache. Every run checks an entry before using "
                  "it: the SHA256 of its ONNX stored when written, no symbolic links, and in a folder others can write "
                  "to only your own files; a refused entry is exported again (one warning line).", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
CACHE = use(ExportSpec, skip=("exporter", "opset", "no_cache", "save_onnx"))


def _folder(spec: ExportSpec) -> tuple[Path, int]:
    """The folder (refused, exit 2, when it exists and is not a folder: for every subcommand) and the cap."""
    from gapcheck.model.cache import DEFAULT_MAX_MB, check_is_folder, default_cache_dir

    folder = Path(spec.cache_dir) if spec.cache_dir else default_cache_dir()
    check_is_folder(folder)
    return folder, (spec.cache_max_mb or DEFAULT_MAX_MB) * 1024 * 1024


def _is_meta(path: Path) -> bool:
    """The description gapcheck writes beside an entry's model (a JSON object naming its exporter)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(_META_MAX_BYTES + 1)
        meta = json.loads(data) if len(data) <= _META_MAX_BYTES else None
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and isinstance(meta.get("exporter"), str)


def _foreign(folder: Path) -> str | None:
    """Why removing the entry-named files of ``folder`` could delete something that is not gapcheck's, or None.

    Other files are never touched (a config kept beside the cache is fine). Files named like entries must be regular
    files, each ``.json`` the description gapcheck writes; a ``<sha256>.onnx`` without its ``.json`` (a writer that
    died) is removed only from a folder with complete entries and nothing else: next to other files it may be a
    user's own model named by its hash."""
    from gapcheck.model.cache import _ENTRY, _TEMP  # the names the cache writes (one definition)

    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return None  # nothing there, nothing removed
    except OSError as exc:
        return f"it cannot be listed: {exc.strerror or type(exc).__name__}"
    entry_names = [name for name in names if _ENTRY.match(name) or _TEMP.match(name)]
    for name in entry_names:
        try:
            mode = os.lstat(folder / name).st_mode
        except FileNotFoundError:  # another process pruned it meanwhile
            continue
        if not stat.S_ISREG(mode):
            return f"{name} is not a regular file"
        if name.endswith(".json") and not _TEMP.match(name) and not _is_meta(folder / name):
            return f"{name} is not an entry's description"
    metas = {name[:-5] for name in entry_names if name.endswith(".json") and _ENTRY.match(name)}
    lone = [name for name in entry_names if name.endswith(".onnx") and _ENTRY.match(name) and name[:-5] not in metas]
    if lone and (not metas or len(entry_names) < len(names)):
        return f"{lone[0]} has no description beside it and may be someone's model named by its hash"
    return None


def _check_cache(folder: Path) -> None:
    """prune and clear remove files: only from a folder that holds nothing but the cache's own."""
    reason = _foreign(folder)
    if reason is not None:
        raise UsageError(f"{folder} does not look like a gapcheck export cache ({reason}): nothing removed; "
                         "check --cache-dir / [cache] dir / $GAPCHECK_CACHE_DIR")


@app.command("info")
@declare(CACHE, section="cache")
def info(groups: Groups) -> None:
    """The folder, its entries, their size and the cap."""
    from gapcheck.model.cache import info as cache_info

    folder, cap = _folder(groups[ExportSpec])
    for line in cache_info(folder, cap).lines():
        typer.echo(safe_line(line))


@app.command("prune")
@declare(CACHE, section="cache")
def prune(groups: Groups) -> None:
    """Remove the least recently used entries until the rest fit in the cap (and incomplete leftovers)."""
    from gapcheck.model.cache import prune as cache_prune

    folder, cap = _folder(groups[ExportSpec])
    _check_cache(folder)
    removed, freed = cache_prune(folder, cap)
    typer.echo(safe_line(f"removed {removed} entr{'y' if removed == 1 else 'ies'}, {freed / 1024**2:.1f} MB freed "
                         f"({folder})"))


@app.command("clear")
@declare(CACHE, section="cache")
def clear(groups: Groups) -> None:
    """Remove every entry."""
    from gapcheck.model.cache import clear as cache_clear

    folder, _ = _folder(groups[ExportSpec])
    _check_cache(folder)
    removed, freed = cache_clear(folder)
    typer.echo(safe_line(f"removed {removed} entr{'y' if removed == 1 else 'ies'}, {freed / 1024**2:.1f} MB freed "
                         f"({folder})"))
