"""gapcheck.toml / ``[tool.gapcheck]`` in pyproject.toml: loading and validation.

Lookup: an explicit path, else ``gapcheck.toml`` then ``pyproject.toml`` (only if it has
``[tool.gapcheck]``) in the current directory and its parents. Every problem is a
:class:`~gapcheck.errors.ConfigError` that names the file and the key. Sections of other
commands are kept as plain tables for those commands to validate.

Example::

    [preprocess]
    samples = "data/val_images"
    n = 256
    p_threshold = 0.01

    [preprocess.stages.train]
    callable = "mypkg.data:train_transform"
    augmented = false

    [preprocess.stages.mobile]
    steps = [{op = "decode", backend = "cv2"}, {op = "resize", size = 224, backend = "cv2"}]
"""
from __future__ import annotations

import logging
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapcheck.errors import ConfigError, GapcheckError
from gapcheck.preprocess.stages import StageSpec, make_spec

logger = logging.getLogger(__name__)

_PREPROCESS_KEYS = {"samples": str, "n": int, "p_threshold": float, "min_effect": float, "workers": int,
                    "repeats": int, "tolerance": float, "stages": dict}
_STAGE_KEYS = {"callable": str, "steps": list, "augmented": bool, "accepts": str}


@dataclass(frozen=True)
class PreprocessConfig:
    samples: str | None = None
    n: int | None = None
    p_threshold: float | None = None
    min_effect: float | None = None
    workers: int | None = None
    repeats: int | None = None
    tolerance: float | None = None
    stages: tuple[StageSpec, ...] = ()


@dataclass(frozen=True)
class GapcheckConfig:
    source: Path | None
    preprocess: PreprocessConfig = field(default_factory=PreprocessConfig)
    sections: dict[str, Any] = field(default_factory=dict)  # every top-level table, for other commands


def find_config(start: Path | None = None) -> Path | None:
    directory = (start or Path.cwd()).resolve()
    for folder in (directory, *directory.parents):
        candidate = folder / "gapcheck.toml"
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                if "gapcheck" in tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}):
                    return pyproject
            except (tomllib.TOMLDecodeError, UnicodeDecodeError):
                continue  # someone else's broken pyproject is not our config
    return None


def load_config(path: str | Path | None = None, start: Path | None = None) -> GapcheckConfig:
    """Load and validate; an explicit ``path`` must exist, a discovered one is optional."""
    source = Path(path) if path is not None else find_config(start)
    if source is None:
        return GapcheckConfig(source=None)
    if not source.is_file():
        raise ConfigError(f"config file not found: {source}")
    try:
        document = tomllib.loads(source.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text") from exc
    if source.name == "pyproject.toml":
        table = document.get("tool", {}).get("gapcheck")
        if table is None:
            raise ConfigError(f"{source} has no [tool.gapcheck] table")
        prefix = "tool.gapcheck."
    else:
        table, prefix = document, ""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: {prefix or 'the top level'} must be a table")
    preprocess = _preprocess(table.get("preprocess", {}), source, prefix + "preprocess")
    return GapcheckConfig(source=source, preprocess=preprocess, sections=dict(table))


def _check_type(value: Any, expected: type, where: str, source: Path) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and expected is not bool or not isinstance(value, expected):
        raise ConfigError(f"{source}: {where} must be {expected.__name__}, not {type(value).__name__} ({value!r})")
    return value


def _table_values(table: Any, known: dict[str, type], source: Path, where: str, shape: str) -> dict[str, Any]:
    """A config table's values, type-checked; unknown keys are an error that lists the known ones."""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [{where}] must be {shape}")
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) in [{where}]: {', '.join(unknown)}",
                          hint=f"known keys: {', '.join(known)}")
    return {key: _check_type(table[key], known[key], f"{where}.{key}", source) for key in known if key in table}


def _preprocess(table: Any, source: Path, where: str) -> PreprocessConfig:
    values = _table_values(table, _PREPROCESS_KEYS, source, where, "a table")
    if "samples" in values:
        sample_path = Path(values["samples"])
        values["samples"] = str(sample_path if sample_path.is_absolute() else source.parent / sample_path)
    stages = tuple(_stage(name, spec, source, f"{where}.stages.{name}", source.parent)
                   for name, spec in values.pop("stages", {}).items())
    return PreprocessConfig(**values, stages=stages)


def _stage(name: str, table: Any, source: Path, where: str, base: Path) -> StageSpec:
    values = _table_values(table, _STAGE_KEYS, source, where, "a table with 'callable' or 'steps'")
    if ("callable" in values) == ("steps" in values):
        raise ConfigError(f"{source}: [{where}] needs exactly one of 'callable' or 'steps'")
    target = values.get("callable", "")
    module, _, attr = target.rpartition(":")
    if module.endswith(".py") and not Path(module).is_absolute():
        target = f"{base / module}:{attr}"  # file targets are relative to the config file
    try:
        return make_spec(name, target=target, steps=values.get("steps"), augmented=values.get("augmented", False),
                         accepts=values.get("accepts", "path"))
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc.message}") from exc
    except GapcheckError as exc:
        raise ConfigError(f"{source}: [{where}]: {exc.message}") from exc
