"""``[lint]`` in gapcheck.toml / ``[tool.gapcheck.lint]``: validated with pydantic.

Example::

    [lint]
    select = ["GC"]                 # code prefixes to run (default: every rule)
    ignore = ["GC601"]              # code prefixes to skip
    exclude = ["legacy/*"]          # paths (globs) not to lint when walking folders
    entry-points = ["train.py", "pkg/cli.py::main"]   # files / functions that start a training run
    target-torch = "2.6"            # the oldest torch the code runs on (default: the project's declared requirement)
    jobs = 4                        # worker processes (default: the machine's CPUs)

    [lint.per-file-ignores]
    "notebooks/*" = ["GC6"]
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from gapcheck.config import Section
from gapcheck.errors import ConfigError, UsageError
from gapcheck.lint.versions import parse_version


class LintSection(Section):
    """The ``[lint]`` table (registered in gapcheck.config.SECTION_MODELS)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)

    select: list[str] = Field(default_factory=lambda: ["GC"])
    ignore: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = Field(default_factory=dict, alias="per-file-ignores")
    entry_points: list[str] = Field(default_factory=list, alias="entry-points")
    jobs: int | None = Field(default=None, ge=1, le=256)
    target_torch: str | None = Field(default=None, alias="target-torch", pattern=r"^\d+(\.\d+){0,2}$")

    @field_validator("select", "ignore")
    @classmethod
    def _upper(cls, value: list[str]) -> list[str]:
        return [v.strip().upper() for v in value]


def section_from(table: Any, source: str = "config") -> LintSection:
    """Validate the ``[lint]`` table (a ConfigError names the key and what is wrong)."""
    try:
        return LintSection.model_validate(table or {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'lint'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{source}: [lint]: {problems}") from exc


@dataclass(frozen=True)
class Selection:
    """Which codes run where; picklable, handed to every worker."""

    select: tuple[str, ...] = ("GC",)
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    entry_points: tuple[str, ...] = ()
    target_torch: tuple[int, ...] | None = None  # overrides the project's declared torch requirement

    def enabled(self, code: str, path: str) -> bool:
        if not any(code.startswith(p) for p in self.select) or any(code.startswith(p) for p in self.ignore):
            return False
        return not any(_matches(path, pattern) and any(code.startswith(p) for p in codes)
                       for pattern, codes in self.per_file_ignores)

    def entry_functions(self, path: str) -> frozenset[str]:
        """Functions named as entry points for ``path`` (``"file.py::main"``); ``"*"`` for a whole file."""
        names = set()
        for item in self.entry_points:
            pattern, _, function = item.partition("::")
            if _matches(path, pattern):
                names.add(function or "*")
        return frozenset(names)


def _matches(path: str, pattern: str) -> bool:
    posix = PurePath(path).as_posix()
    return fnmatch.fnmatch(posix, pattern) or fnmatch.fnmatch(posix, f"*/{pattern}") or PurePath(posix).name == pattern


def make_selection(section: LintSection, *, select: list[str] | None = None, ignore: list[str] | None = None,
                   known: tuple[str, ...] = (), target_torch: str | None = None) -> Selection:
    """The selection: flags replace ``select`` and add to ``ignore``; a selector matching no code is an error."""
    chosen = tuple(s.strip().upper() for s in select) if select else tuple(section.select)
    skipped = tuple(section.ignore) + tuple(s.strip().upper() for s in ignore or ())
    per_file = tuple((pattern, tuple(c.strip().upper() for c in codes))
                     for pattern, codes in section.per_file_ignores.items())
    if known:
        for selector in (*chosen, *skipped, *(c for _, codes in per_file for c in codes)):
            if not selector or not any(code.startswith(selector) for code in known):
                raise UsageError(f"unknown lint code or prefix: {selector!r}",
                                 hint="gapcheck explain --list shows every code")
    target = target_torch or section.target_torch
    version = parse_version(target) if target else None
    if target and (version is None or not re.fullmatch(r"\d+(\.\d+){0,2}", target.strip())):
        raise UsageError(f"--target-torch: not a version like 2.6: {target!r}")
    return Selection(select=chosen, ignore=skipped, per_file_ignores=per_file, entry_points=tuple(section.entry_points),
                     target_torch=version)
