"""gapcheck.toml / ``[tool.gapcheck]``: one loader, one section per command, validated by pydantic.

Lookup: an explicit path, else ``gapcheck.toml`` then ``pyproject.toml`` (only if it has
``[tool.gapcheck]``) in the current directory and its parents.

Each command owns one section (``[export_diff]``, ``[preprocess]``, ``[nightly]``, ``[leakage]``, ``[lint]``...),
each group its own (``[triton]``, ``[engine]``, ``[cache]``, ``[remote]``), and registers a pydantic model for it,
either eagerly with :func:`register_section` or lazily with one line in :data:`SECTION_MODELS` (``"module:Class"``,
so loading a config never imports a heavy module). A section no model is registered for is a ConfigError naming it
and the close name (:func:`known_sections`). A relative path a file gives is relative to the file
(:meth:`GapcheckConfig.path`). Values merge **file < environment < flags**:
``GAPCHECK_<SECTION>__<KEY>=value`` overrides the file (nested keys joined by ``__``; values read as
TOML, so ``GAPCHECK_PREPROCESS__N=16`` is an int and ``...__SAMPLES=data/x`` a string), and the CLI
applies its flags last (:func:`gapcheck.cli.groups.resolve`). Every problem is a :class:`~gapcheck.errors.ConfigError`
naming the file (or environment variable), the key, and what was expected.

Why pydantic: it is already a dependency of the new commands, v2 validates in compiled code, gives
each error a location path we can turn into ``file: section.key``, and strict mode refuses ``n = "3"``
instead of guessing. (msgspec would do too; two validation libraries would not.)

Example::

    [preprocess]
    samples = "data/val_images"      # relative paths are relative to this file
    n = 256

    [preprocess.stages.train]
    callable = "mypkg.data:train_transform"

    [export_diff]
    num_samples = 4
    tolerances = { "layer1.*" = [1e-3, 1e-4] }
"""
from __future__ import annotations

import functools
import importlib
import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gapcheck.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

logger = logging.getLogger(__name__)
ENV_PREFIX = "GAPCHECK_"


class Section(BaseModel):
    """Base of every section model: strict types, unknown keys refused, frozen values."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


# --- the sections this module owns -------------------------------------------------------------
def _tolerance_pairs(data: Any) -> Any:
    """TOML has arrays, not tuples: ``[1e-3, 1e-4]`` in ``tolerances`` is the (rtol, atol) pair."""
    if isinstance(data, dict) and isinstance(data.get("tolerances"), dict):
        data = {**data, "tolerances": {k: tuple(v) if isinstance(v, list) else v for k, v in data["tolerances"].items()}}
    return data


#: one rtol or atol of a ``tolerances`` pattern: finite and >= 0 (a NaN budget passes every comparison)
Budget = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _SampledSection(Section):
    """Keys every command that draws samples and compares them shares (export-diff, golden record)."""

    num_samples: Optional[int] = Field(default=None, ge=1)
    seed: Optional[int] = None
    rtol: Optional[float] = Field(default=None, ge=0, allow_inf_nan=False)
    atol: Optional[float] = Field(default=None, ge=0, allow_inf_nan=False)
    tolerances: dict[str, tuple[Budget, Budget]] = Field(default_factory=dict)  # pattern -> [rtol, atol]
    exporter: Optional[Literal["dynamo", "torchscript"]] = None
    opset: Optional[int] = Field(default=None, ge=7)

    @model_validator(mode="before")
    @classmethod
    def _lists_as_tuples(cls, data: Any) -> Any:
        return _tolerance_pairs(data)


class ExportDiffSection(_SampledSection):
    precision: Optional[Literal["fp32", "fp16", "bf16", "int8"]] = None
    batch_sizes: Optional[list[int]] = None
    max_intermediate_mb: Optional[int] = Field(default=None, ge=1)


class TritonSection(Section):
    """``[triton]``: the keys of :class:`gapcheck.groups.TritonTarget` (ranges checked again by the group)."""

    url: Optional[str] = None
    model: Optional[str] = None
    version: Optional[str] = None
    protocol: Optional[Literal["grpc", "http"]] = None
    timeout_s: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
    retries: Optional[int] = Field(default=None, ge=0)
    deadline_s: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
    output_map: Optional[list[str]] = None
    input_map: Optional[list[str]] = None
    ssl: bool = False
    ssl_root_cert: Optional[str] = None
    ssl_private_key: Optional[str] = None
    ssl_cert_chain: Optional[str] = None
    ssl_insecure: bool = False


class GoldenSection(_SampledSection):
    """``[golden]``: the recording defaults of ``gapcheck golden record`` (its groups' keys; tolerance patterns are
    output globs)."""


class CacheSection(Section):
    """``[cache]``: the export cache (:class:`gapcheck.groups.ExportSpec`'s keys)."""

    dir: Optional[str] = None
    max_mb: Optional[int] = Field(default=None, ge=1)


# --- registration ------------------------------------------------------------------------------
#: section name -> "module:Class" of its model, imported only when a file or the environment has that section.
#: A command adds its line here (or calls register_section at import). Keep section models in light modules.
SECTION_MODELS: dict[str, str] = {
    "preprocess": "gapcheck.preprocess.config:PreprocessSection",
    "export_diff": "gapcheck.config:ExportDiffSection",
    "triton": "gapcheck.config:TritonSection",
    "lint": "gapcheck.lint.config:LintSection",
    "nightly": "gapcheck.nightly.config:NightlyConfig",
    "golden": "gapcheck.config:GoldenSection",
    "cache": "gapcheck.config:CacheSection",
    "engine": "gapcheck.engines.config:EngineSection",
    "leakage": "gapcheck.data.config:LeakageSection",
    "drift": "gapcheck.data.config:DriftSection",
    "precision": "gapcheck.precision.config:PrecisionSection",
    "text": "gapcheck.text.config:TextSection",
    "remote": "gapcheck.groups.remote:RemoteSection",
}
_REGISTERED: dict[str, type[BaseModel]] = {}


def register_section(name: str, model: type[BaseModel]) -> None:
    """Register ``[name]``'s model (a pydantic model; subclass :class:`Section` for strict, closed tables)."""
    previous = _REGISTERED.get(name)
    if previous is not None and previous is not model:
        raise RuntimeError(f"config section [{name}] registered twice ({previous.__qualname__} and {model.__qualname__})")
    _REGISTERED[name] = model


def section_model(name: str) -> type[BaseModel] | None:
    if name not in _REGISTERED and name in SECTION_MODELS:
        module, _, attribute = SECTION_MODELS[name].partition(":")
        register_section(name, getattr(importlib.import_module(module), attribute))
    return _REGISTERED.get(name)


# --- loading -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GapcheckConfig:
    source: Path | None
    sections: dict[str, Any] = field(default_factory=dict)  # every top-level table as merged (file < environment)
    validated: dict[str, BaseModel] = field(default_factory=dict)  # registered sections, validated
    from_environment: frozenset[tuple[str, ...]] = frozenset()  # (section, key, ...) set by GAPCHECK_... variables

    def path(self, section: str, key: str, value: str | Path) -> Path:
        """A path that ``[section] key`` (dotted for nested keys) holds: a relative one is relative to the config
        file when the file gave it, to the working folder when the environment did (as a flag's is)."""
        path = Path(value)
        if path.is_absolute() or self.source is None or (section, *key.split(".")) in self.from_environment:
            return path
        return self.source.parent / path

    def resolved(self, name: str) -> Any:
        """What a command reads of ``[name]``: the section's ``resolved(name, config)`` when it has one (paths made
        absolute, values built: ``[preprocess]``), else the validated section."""
        section = self.section(name)
        resolve = getattr(section, "resolved", None)
        return resolve(name, self) if callable(resolve) else section

    @functools.cached_property
    def preprocess(self) -> Any:
        """``[preprocess]`` resolved (:class:`gapcheck.preprocess.config.PreprocessConfig`)."""
        return self.resolved("preprocess")

    def section(self, name: str) -> BaseModel | None:
        """The validated model of ``[name]`` (its defaults when absent), or None when no model is registered."""
        if name in self.validated:
            return self.validated[name]
        model = section_model(name)
        return None if model is None else _validate(model, name, self.sections.get(name, {}), self.source, set())


MAX_CONFIG_BYTES = 10 * 1024 * 1024  # a config is a few KB; a bigger file is not read (memory, parse time)


def _parse_toml(source: Path) -> dict[str, Any]:
    """The TOML document of ``source``; ConfigError (exit 2, one line naming the file) when it is too big, not UTF-8,
    invalid, or nested too deeply for the parser (5,000 nested arrays made a RecursionError: exit 3 everywhere)."""
    try:
        with source.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot be read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES // 1024**2} MB; not a config file")
    try:
        document: dict[str, Any] = tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text") from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid TOML: nested too deeply") from None
    return document


def find_config(start: Path | None = None) -> Path | None:
    directory = (start or Path.cwd()).resolve()
    for folder in (directory, *directory.parents):
        candidate = folder / "gapcheck.toml"
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                if "gapcheck" in _parse_toml(pyproject).get("tool", {}):
                    return pyproject
            except ConfigError:
                if _mentions_gapcheck(pyproject):
                    raise  # ours, but unreadable: say so rather than run without it
                continue  # someone else's broken pyproject is not our config
    return None


def _mentions_gapcheck(pyproject: Path) -> bool:
    try:
        with pyproject.open("rb") as handle:
            return b"tool.gapcheck" in handle.read(MAX_CONFIG_BYTES)
    except OSError:
        return False


def load_config(path: str | Path | None = None, start: Path | None = None,
                environ: Mapping[str, str] | None = None) -> GapcheckConfig:
    """Load, merge the environment, validate every registered section present; an explicit ``path`` must exist."""
    source = Path(path) if path is not None else find_config(start)
    table = _read_table(source) if source is not None else {}
    from_env = _environment_tables(os.environ if environ is None else environ)
    merged = _deep_merge(table, from_env)
    env_keys = {key for key, _ in _flatten(from_env)}
    validated = {}
    for name in merged:
        model = section_model(name)
        if model is None:
            raise ConfigError(_unknown_section(name, source, env_keys))
        validated[name] = _validate(model, name, merged[name], source, env_keys)
    return GapcheckConfig(source=source, sections=merged, validated=validated, from_environment=frozenset(env_keys))


def known_sections() -> list[str]:
    """Every section a config may hold: the lazily registered ones and those registered at import."""
    return sorted({*SECTION_MODELS, *_REGISTERED})


def _unknown_section(name: str, source: Path | None, env_keys: set[tuple[str, ...]]) -> str:
    """``[export_dif]`` was read by nothing and the run passed: exit 2 naming the table (or the variables that made
    it) and the close name."""
    import difflib

    origin = _came_from((name,), env_keys, str(source or "configuration"))
    close = difflib.get_close_matches(name, known_sections(), n=1)
    hint = f"did you mean [{close[0]}]?" if close else f"known sections: {', '.join(known_sections())}"
    return f"{origin}: unknown section [{name}]; {hint}"


def _came_from(path: tuple[str, ...], env_keys: set[tuple[str, ...]], origin: str) -> str:
    """``environment GAPCHECK_...`` for a key (or a table) an environment variable set, else the file."""
    variables = sorted(_variable(key) for key in env_keys if key[:len(path)] == path)
    return f"environment {', '.join(variables)}" if variables else origin


def _variable(key: tuple[str, ...]) -> str:
    return f"{ENV_PREFIX}{'__'.join(part.upper() for part in key)}"


def _read_table(source: Path) -> dict[str, Any]:
    if not source.is_file():
        raise ConfigError(f"config file not found: {source}")
    document = _parse_toml(source)
    if source.name == "pyproject.toml":
        table = document.get("tool", {}).get("gapcheck")
        if table is None:
            raise ConfigError(f"{source} has no [tool.gapcheck] table")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: tool.gapcheck must be a table")
        return dict(table)
    return dict(document)


def _environment_tables(environ: Mapping[str, str]) -> dict[str, Any]:
    """``GAPCHECK_PREPROCESS__N=16`` -> {"preprocess": {"n": 16}} (values parsed as TOML, else kept as text)."""
    tables: dict[str, Any] = {}
    for name, text in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX):].split("__")]
        if not all(path):
            continue
        node = tables
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"environment {name}: {'.'.join(path[:-1])} is set both as a value and as a table")
            node = child
        node[path[-1]] = _env_value(name, text)
    return tables


def _env_value(name: str, text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:
        raise ConfigError(f"environment {name}: nested too deeply") from None


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _flatten(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    items: list[tuple[tuple[str, ...], Any]] = []
    for key, value in table.items():
        items += _flatten(value, (*prefix, key)) if isinstance(value, dict) else [((*prefix, key), value)]
    return items


def _validate(model: type[BaseModel], name: str, table: Any, source: Path | None,
              env_keys: set[tuple[str, ...]]) -> BaseModel:
    origin = str(source) if source is not None else "configuration"
    if not isinstance(table, dict):
        raise ConfigError(f"{origin}: [{name}] must be a table, not {type(table).__name__}")
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, name, origin, env_keys, model)) from None


# Keys whose values are never echoed in a configuration error (matched anywhere in the dotted key).
_SECRET_KEY = re.compile(r"header|token|secret|passw|webhook|url|auth|cookie|credential|api_?key", re.IGNORECASE)


def _describe(exc: ValidationError, name: str, origin: str, env_keys: set[tuple[str, ...]],
              model: type[BaseModel] | None = None) -> str:
    """One line per problem: where it came from, the dotted key, what was expected and what was given."""
    unknown: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}  # (where it came from, table, its loc) -> keys
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"] if not str(part).startswith("function-after")]
        key = ".".join([name, *loc])
        came_from = _came_from((name, *loc), env_keys, origin)
        if error["type"] == "extra_forbidden":
            unknown.setdefault((came_from, ".".join([name, *loc[:-1]]), tuple(loc[:-1])), []).append(loc[-1])
            continue
        message = str(error["msg"]).removeprefix("Value error, ")
        value = error.get("input")
        if _SECRET_KEY.search(key):  # header values, tokens, webhook and endpoint URLs may hold credentials
            if value is not None and not isinstance(value, (dict, list)) and str(value):
                message = message.replace(str(value), "<redacted>")
            given = " (value not shown: it may hold a credential)"
        else:
            given = f" (got {value!r})" if "input" in error and not isinstance(value, dict) else ""
        lines.append(f"{came_from}: {key}: {message}{given}")
    for (came_from, table, table_loc), keys in unknown.items():
        known = _known_keys(model, table_loc) if model is not None else []
        valid = f" (valid keys: {', '.join(known)})" if known else ""
        lines.insert(0, f"{came_from}: unknown key(s) in [{table}]: {', '.join(keys)}{valid}")
    return "\n".join(lines)


def _known_keys(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The keys the table at ``loc`` inside ``model`` accepts (through nested models, dict values, Optional); [] when
    that cannot be told. An unknown key is easier to fix beside the valid ones (``target`` in a stage table)."""
    import types
    import typing

    def model_of(annotation: Any) -> Any:  # Optional[X] / X | None -> X
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
        return model_of(args[0]) if union and len(args) == 1 else annotation

    current: Any = model
    for part in loc:
        current = model_of(current)
        if isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            current = current.model_fields[part].annotation
        elif typing.get_origin(current) is dict and len(typing.get_args(current)) == 2:
            current = typing.get_args(current)[1]
        else:
            return []
    current = model_of(current)
    return list(current.model_fields) if isinstance(current, type) and issubclass(current, BaseModel) else []
