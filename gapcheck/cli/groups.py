"""A command is a declaration of the option groups it uses; this module turns the declaration into typer options and
resolves them, file < environment < flags, in :func:`resolve` — the one place that does.

Modelled on Polygraphy's ``tools/args``: a group registers its flags (here: its ``OPTIONS``), parses them, and
builds the object the tool uses (here: the group's ``load()``, ``samples()``, ``endpoint()`` ...)::

    @declare(ModelSource, use(InputSource, num_samples=16), ToleranceSpec, use(ExportSpec, skip=("save_onnx",)),
             ReportTargets, section="golden")
    def record(groups: Groups, out: Path = typer.Option(..., "--out")) -> None:
        model = groups[ModelSource].load()
        ...
        raise typer.Exit(groups[ReportTargets].emit(result))

The decorated function keeps its own options; ``ctx`` and ``--config`` are added when it does not declare them.
A value from a flag wins; a flag left alone takes the command's section (``[golden]``), then the group's own section
(``[triton]``, ``[engine]``, ``[cache]``), then the group's default (or the declaration's, ``use(InputSource, num_samples=16)``).
Both sections already include ``GAPCHECK_<SECTION>__<KEY>`` from the environment (:mod:`gapcheck.config`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import re
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar, Union, get_args, get_origin

import typer
from typer.models import OptionInfo, ParameterInfo

from gapcheck.errors import UsageError
from gapcheck.groups import Group, Opt, ReportTargets

G = TypeVar("G", bound=Group)
_INVERTED = {"strict"}  # fields whose flag is the negative form (--non-strict sets strict=False)


@dataclass(frozen=True)
class Use:
    """One group in a command's declaration: options it leaves out, and defaults it sets otherwise (listed in
    ``tests/cli/test_groups_matrix.py``; every other default is the group's own)."""

    group: type[Group]
    skip: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def options(self) -> list[Opt]:
        return [opt for opt in self.group.OPTIONS if opt.field not in self.skip]

    def default(self, opt: Opt) -> Any:
        return self.defaults.get(opt.field, self.group.defaults().get(opt.field))


def use(group: type[Group], *, skip: tuple[str, ...] = (), **defaults: Any) -> Use:
    return Use(group, tuple(skip), dict(defaults))


@dataclass(frozen=True)
class Groups:
    """The resolved groups of one command run, by class; ``config`` is the loaded configuration; ``flags`` the fields
    set on the command line and ``given`` those set there or in the configuration (file or environment)."""

    values: Mapping[type[Group], Group]
    config: Any
    given: Mapping[type[Group], frozenset[str]]
    flags: Mapping[type[Group], frozenset[str]]

    def __getitem__(self, cls: type[G]) -> G:
        value = self.values[cls]
        assert isinstance(value, cls)
        return value

    def __contains__(self, cls: object) -> bool:
        return cls in self.values


def param_name(group: type[Group], opt: Opt) -> str:
    return f"{group.__name__.lower()}__{opt.field}"


def _typer_kind(opt: Opt) -> Any:
    if get_origin(opt.kind) is list:
        return list[str]
    return opt.kind


def _has_key(section: str, key: str) -> bool:
    """Whether ``[section]``'s model takes ``key`` (the help names only the places that exist)."""
    from gapcheck.config import section_model

    model = section_model(section)
    return model is not None and key in getattr(model, "model_fields", {})


def _help(opt: Opt, group: type[Group], section: str | None) -> str:
    """The option's help, plus where else it can be set (the command's section first, then the group's)."""
    places = [s for s in (section, group.SECTION) if s and opt.key and _has_key(s, opt.key)]
    if not places:
        return opt.help
    where = " or ".join(f"{s}.{opt.key} / {opt.environment(s)}" for s in places)
    return f"{opt.help} Config: {where}."


def _option(opt: Opt, default: Any, flag: str, *, hidden: bool = False, help: str | None = None) -> inspect.Parameter:
    kind = _typer_kind(opt)
    if get_origin(kind) is list:
        value: Any = []
    elif opt.field in _INVERTED:
        value = not default
    elif hidden:
        value = False if kind is bool else None
    else:
        value = default
    if hidden and kind is not bool and get_origin(kind) is not list:
        kind = Optional[kind] if type(None) not in get_args(kind) else kind
    metavar = opt.metavar or ("PATH" if _is_path(kind) else None)  # what typer shows for a Path without a parser
    info = typer.Option(value, flag, help=None if hidden else help or opt.help, hidden=hidden, metavar=metavar,
                        show_default=not hidden and value not in (None, [], False),
                        parser=_nonempty_path if _is_path(kind) else None)
    return inspect.Parameter("_", inspect.Parameter.KEYWORD_ONLY, default=info, annotation=kind)


def _is_path(kind: Any) -> bool:
    """Path, Optional[Path], list[Path] (inside Annotated too)."""
    if get_origin(kind) is Annotated:
        kind = get_args(kind)[0]
    if kind is Path:
        return True
    return get_origin(kind) in (list, Union, types.UnionType) and Path in get_args(kind)


def _nonempty_path(value: Any) -> Any:
    """typer turns ``--flag ''`` into Path('.'), the current folder (``--cache-dir ''`` made it the export cache,
    ``--samples ''`` audited it): an empty path on the command line is a usage error (exit 2), like in a config."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("an empty path: name a file or folder")
        return Path(value)
    return value


def _guard_own_path(parameter: inspect.Parameter) -> None:
    """Give a command's own Path option or argument the same empty-path check (one without typer's path checks:
    ``exists=True`` and the like already refuse '', and a parser would switch them off)."""
    if not _is_path(parameter.annotation):
        return
    infos = [parameter.default, *get_args(parameter.annotation)[1:]]
    for info in infos:
        if isinstance(info, ParameterInfo) and info.parser is None and getattr(info, "click_type", None) is None and not (
                info.exists or info.resolve_path or info.allow_dash or info.path_type is not None
                or not info.file_okay or not info.dir_okay or not info.readable or info.writable):
            info.parser = _nonempty_path
            if isinstance(info, OptionInfo) and info.metavar is None:
                info.metavar = "PATH"  # what typer shows for a Path without a parser


def declare(*declared: Use | type[Group], section: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command: its signature gains every option of the declared groups, and it receives ``groups``."""
    uses = tuple(u if isinstance(u, Use) else Use(u) for u in declared)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "groups"]
        for parameter in own:
            _guard_own_path(parameter)
        names = {p.name for p in own}
        added: list[inspect.Parameter] = []
        if "ctx" not in names:
            added.append(inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context))
        for u in uses:
            for opt in u.options():
                base = param_name(u.group, opt)
                added.append(_option(opt, u.default(opt), opt.flag, help=_help(opt, u.group, section)).replace(name=base))
                for i, alias in enumerate(opt.aliases):
                    added.append(_option(opt, None, alias, hidden=True).replace(name=f"{base}__alias{i}"))
        if "config" not in names:
            added.append(inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(
                None, "--config", help="gapcheck.toml or pyproject.toml (default: discovered from the current "
                "directory).", parser=_nonempty_path), annotation=Optional[Path]))
        ordered = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty]
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p not in ordered]
        ctx_first = [p for p in added if p.name == "ctx"] + ordered
        labels = {p.name: _label(p) for p in own if p.name not in ("ctx", "config")}
        params = ctx_first + rest + [p for p in added if p.name != "ctx"]

        @functools.wraps(fn)
        def command(**values: Any) -> Any:
            ctx = values["ctx"] if "ctx" in names else values.pop("ctx")
            config = values["config"] if "config" in names else values.pop("config")
            group_values = {k: values.pop(k) for k in list(values) if "__" in k}
            own_values = {labels[k]: v for k, v in values.items() if k in labels}
            if config is not None:
                own_values["--config"] = config
            groups = resolve(ctx, uses, group_values, section=section, config=config, own=own_values)
            return fn(groups=groups, **values)

        del command.__wrapped__  # typer must read the signature below, not fn's
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


def _label(parameter: inspect.Parameter) -> str:
    """How the user spelled a command's own parameter: its first flag (``--out``), else its name (``BUNDLE``)."""
    infos = [parameter.default, *get_args(parameter.annotation)[1:]]
    for info in infos:
        decls = tuple(getattr(info, "param_decls", None) or ())
        first = getattr(info, "default", None)
        if isinstance(first, str) and first.startswith("--"):  # inside Annotated, typer.Option("--x") puts it here
            decls = (first, *decls)
        if decls:
            return str(next((d for d in decls if d.startswith("--")), decls[0]))
    return parameter.name.upper()


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)  # typer may vendor click: compare the enum by name
    return source is not None and getattr(source, "name", "") not in ("DEFAULT", "DEFAULT_MAP")


def _from_config(opt: Opt, sections: tuple[tuple[str | None, Any], ...], loaded: Any) -> Any:
    """The option's value from the first (section name, validated section) that sets it; a path that a config file
    gave is relative to that file, one the environment gave to the working folder (``loaded.path``)."""
    if opt.key is None:
        return None
    for name, section in sections:
        value = getattr(section, opt.key, None) if section is not None else None
        if value is not None and value != {} and value != []:
            if opt.kind in (Path, Optional[Path]):
                if not str(value).strip():  # Path("") is the current folder: `dir = ""` put the cache entries there
                    raise UsageError(f"config key {opt.key} (as {opt.flag}) is an empty path: remove it or name a path")
                return loaded.path(name, opt.key, value) if name else Path(value)
            return tuple(value) if isinstance(value, list) else value
    return None


def resolve(ctx: typer.Context, uses: tuple[Use, ...], values: Mapping[str, Any], *, section: str | None,
            config: Path | None, own: Mapping[str, Any] | None = None) -> Groups:
    """THE resolution: for each declared group, each option from its flag (a hidden older spelling counts as the
    flag), else the command's config section, else the group's own section, else the default; then the group is
    built, which validates it (exit 2 before any work). A group that writes files (its ``inputs`` field) is then
    handed the paths the command reads — the other groups' and the command's ``own`` values (flag -> value) — so
    no report or saved model replaces an input."""
    from gapcheck.config import load_config

    loaded = load_config(config)
    command_section = loaded.section(section) if section else None
    built: dict[type[Group], Group] = {}
    given_fields: dict[type[Group], frozenset[str]] = {}
    flag_fields: dict[type[Group], frozenset[str]] = {}
    for u in uses:
        own_section = loaded.section(u.group.SECTION) if u.group.SECTION else None
        fields_: dict[str, Any] = {}
        from_config: dict[str, Any] = {}
        given: set[str] = set()
        flags: set[str] = set()
        spelled: dict[str, str] = {}  # flag -> the older spelling the user typed (nightly's --header)
        for opt in u.options():
            name = param_name(u.group, opt)
            value, is_given = values[name], _given(ctx, name)
            for i in range(len(opt.aliases)):
                alias = f"{name}__alias{i}"
                if not is_given and _given(ctx, alias):
                    value, is_given = values[alias], True
                    spelled[opt.flag] = opt.aliases[i]
            if opt.field in _INVERTED:
                value = not value
            from_config[opt.field] = _from_config(opt, ((section, command_section), (u.group.SECTION, own_section)),
                                                  loaded)
            if is_given:
                given.add(opt.field)
                flags.add(opt.field)
                fields_[opt.field] = tuple(value) if isinstance(value, list) else value
            elif from_config[opt.field] is not None:
                given.add(opt.field)
                fields_[opt.field] = from_config[opt.field]
            else:
                fields_[opt.field] = u.default(opt)
        with _as_typed(spelled):
            built[u.group] = _build(u.group, fields_, from_config, frozenset(flags))
        given_fields[u.group], flag_fields[u.group] = frozenset(given), frozenset(flags)
    _hand_inputs(uses, built, own or {})
    _check_outputs(uses, built, own or {})
    return Groups(values=built, config=loaded, given=given_fields, flags=flag_fields)


def _build(group: type[Group], fields_: dict[str, Any], from_config: dict[str, Any], flags: frozenset[str]) -> Group:
    """The group from its resolved fields, through its ``from_cli`` hook when it has one (a hook that takes ``flags``
    is told which fields the command line set); building it validates it."""
    from_cli = getattr(group, "from_cli", None)
    if from_cli is not None:
        layered = "flags" in inspect.signature(from_cli).parameters
        fields_ = from_cli(fields_, from_config, flags=flags) if layered else from_cli(fields_, from_config)
    return group(**fields_)


@contextlib.contextmanager
def _as_typed(spelled: Mapping[str, str]) -> Iterator[None]:
    """A group's error names its flag (``--triton-header``); the user typed an older spelling (``--header``): say
    that one."""
    try:
        yield
    except UsageError as exc:
        message = exc.message
        for flag, alias in spelled.items():
            message = re.sub(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", alias, message)
        if message == exc.message:
            raise
        raise UsageError(message, hint=exc.hint, parameter=exc.parameter) from exc


_NOT_PATHS = frozenset({"headers"})  # secrets, never a path: never read, never named in a message


def _hand_inputs(uses: tuple[Use, ...], built: dict[type[Group], Group], own: Mapping[str, Any]) -> None:
    """Rebuild (and so re-check) each group with an ``inputs`` field, given every path the command names elsewhere:
    the other groups' fields and the command's own options."""
    from_groups = {u.group: [(opt.flag, getattr(built[u.group], opt.field)) for opt in u.options()
                             if opt.field not in _NOT_PATHS] for u in uses if u.group is not ReportTargets}
    command_paths = _paths(own.items())
    for cls, group in built.items():
        if "inputs" not in {f.name for f in dataclasses.fields(group)}:  # type: ignore[arg-type]
            continue
        others = [pair for other, pairs in from_groups.items() if other is not cls for pair in pairs]
        paths = tuple(dict.fromkeys((*_paths(others), *command_paths)))
        if paths:
            built[cls] = dataclasses.replace(group, inputs=paths)  # type: ignore[type-var]


#: Group fields that name a file the command writes besides its reports (precision's --fix, --save-onnx): checked
#: here against every path the command names, whichever group declares them (the reports check themselves).
OUTPUT_FIELDS = frozenset({"fix", "save_onnx"})


def _check_outputs(uses: tuple[Use, ...], built: dict[type[Group], Group], own: Mapping[str, Any]) -> None:
    """No written file replaces a file the command reads: ``--fix tinymodels.py`` replaced the --model factory's
    source, ``--fix gapcheck.toml --config gapcheck.toml`` the config (exit 0). Exit 2 before any work."""
    from gapcheck.atomic import check_not_input

    named = [(u, opt) for u in uses for opt in u.options() if opt.field not in _NOT_PATHS]
    for u, opt in named:
        target = getattr(built[u.group], opt.field, None)
        if opt.field not in OUTPUT_FIELDS or target is None:
            continue
        others = [(o.flag, getattr(built[v.group], o.field)) for v, o in named if (v.group, o.field) != (u.group, opt.field)]
        check_not_input(target, opt.flag, [*_paths(others), *_paths(own.items())])


def _paths(items: Any) -> list[tuple[str, Path]]:
    """(flag, path) for each value that names a local path: a Path (existing or not: ``--out`` is made by the work),
    or a string one of whose readings exists (``name=data/train``, ``file.jsonl:field``, ``hf:tok,fast``,
    ``net.py:build``). A glob is not expanded (a report matching one is not caught)."""
    out: list[tuple[str, Path]] = []
    for flag, value in items:
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(item, Path):
                out.append((flag, item))
            elif isinstance(item, str) and item:
                out.extend((flag, Path(text)) for text in _readings(item) if _exists(text))
    return out


def _readings(text: str) -> list[str]:
    """The local paths a string option may name (only the existing ones are kept)."""
    readings = [text]
    if "=" in text and "://" not in text.partition("=")[0]:
        readings.append(text.partition("=")[2])  # name=location
    for reading in list(readings):
        for prefix in ("file://", "hf:"):
            if reading.startswith(prefix):
                readings.append(reading[len(prefix):])
    for reading in list(readings):
        readings.append(reading.split(",")[0])
        readings.append(reading.rpartition(":")[0])  # FILE:field, path.py:callable
    return [r for r in dict.fromkeys(readings) if r]


def _exists(text: str) -> bool:
    try:
        return os.path.lexists(text)
    except (OSError, ValueError):
        return False
