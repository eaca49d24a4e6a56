"""The one registry of finding codes.

Every code gapcheck can emit is declared exactly once, in the data file of its family
(``gapcheck/codes/<family>.toml``, shipped as package data), with its default severity, a one-line
title, a longer explanation and the usual fix — as TorchFix keeps its rules — and bound to a Python
constant in the family's catalog module (``gapcheck/codes/<family>.py``). ``gapcheck explain CODE``
reads it; tests fail when a code is emitted that is not registered, registered without
documentation, or in a data file without a constant.

Adding a code is one ``[code]`` entry in the family's data file plus one constant line in its
module (``NEW_CODE = _codes["new_code"]``); adding a family is one new module and data file plus
one entry in :data:`FAMILIES`. Emit findings through the code object so severity never drifts::

    from gapcheck.codes.export_diff import LAYER_DIVERGENCE
    LAYER_DIVERGENCE.finding("act introduces the error", subject=Subject(module="act"), evidence={...})

The data files are ours, but are read as if they were not: an entry lacking a field or carrying an
unknown one, an unknown severity, a code declared twice (in one file or across files) and a
constant naming a code its file lacks all raise :class:`CatalogError` at import, naming the file.

This package imports nothing heavy (no torch, numpy, onnx); a family's file is parsed once, when
its module is first imported.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gapcheck.findings import Finding, Severity, Subject

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: Catalog modules, one per command family (the only list to extend for a new family).
FAMILIES: tuple[str, ...] = (
    "gapcheck.codes.export_diff",
    "gapcheck.codes.preprocess",
    "gapcheck.codes.triton",
    "gapcheck.codes.metrics",
    "gapcheck.codes.padding",
    "gapcheck.codes.nightly",
    "gapcheck.codes.guards",
    "gapcheck.codes.data",
    "gapcheck.codes.lint",
    "gapcheck.codes.text",
    "gapcheck.codes.precision",
)

_REGISTRY: dict[str, "Code"] = {}


@dataclass(frozen=True)
class Code:
    """A registered finding code: identity, default severity and documentation."""

    code: str
    severity: Severity
    family: str
    title: str
    explanation: str
    fix: str

    def finding(
        self,
        message: str,
        *,
        subject: Subject | None = None,
        evidence: dict[str, Any] | None = None,
        severity: Severity | None = None,
        where: str = "",
    ) -> Finding:
        """A :class:`Finding` of this code; ``severity`` overrides the default where a code's weight depends on context."""
        return Finding(code=self.code, severity=severity or self.severity, message=message, where=where,
                       evidence=dict(evidence or {}), subject=subject or Subject())

    def __str__(self) -> str:
        return self.code


class CatalogError(RuntimeError):
    """A family's data file, or its module's constants, break the registry's rules (a bug in gapcheck, not in input)."""


def _code(code: str, severity: Severity, family: str, title: str, explanation: str, fix: str) -> Code:
    # White space is folded so that a data file may wrap its texts as it likes.
    return Code(code=code, severity=severity, family=family, title=title.strip(), explanation=" ".join(explanation.split()),
                fix=" ".join(fix.split()))


def define(code: str, severity: Severity, family: str, title: str, explanation: str, fix: str) -> Code:
    """Declare one code by hand (the data files are the usual way). A second declaration is an error."""
    return register([_code(code, severity, family, title, explanation, fix)], family)[code]


_FIELDS = ("severity", "title", "explanation", "fix")


@dataclass(frozen=True)
class Catalog:
    """One family's registered codes, by code: a catalog module binds its constants as ``NAME = _codes["code"]``."""

    source: str
    entries: Mapping[str, Code]

    def __getitem__(self, code: str) -> Code:
        if code not in self.entries:
            raise CatalogError(f"{self.source} has no entry [{code}], but a constant names it")
        return self.entries[code]


def parse_catalog(text: str, source: str) -> tuple[Code, ...]:
    """The codes a data file declares, validated (nothing is registered): ``family = "..."`` then one table per code."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # a code declared twice in one file lands here too
        raise CatalogError(f"{source}: not valid TOML: {exc}") from None
    family = document.pop("family", None)
    if not isinstance(family, str) or not family.strip():
        raise CatalogError(f"{source}: needs a top-level family = \"name\" before the first [code]")
    return tuple(_entry(code, fields, family, source) for code, fields in document.items())


def _entry(code: str, fields: Any, family: str, source: str) -> Code:
    where = f"{source} [{code}]"
    if not isinstance(fields, dict):
        raise CatalogError(f"{where}: a code is a table with {', '.join(_FIELDS)}; found {type(fields).__name__}")
    missing = [name for name in _FIELDS if not isinstance(fields.get(name), str) or not fields[name].strip()]
    unknown = sorted(set(fields) - set(_FIELDS))
    problems = [f"{label}: {', '.join(names)}" for label, names in (("missing or empty", missing), ("unknown", unknown)) if names]
    if problems:
        raise CatalogError(f"{where}: fields {'; '.join(problems)} (a code has {', '.join(_FIELDS)}, all text)")
    try:
        severity = Severity(fields["severity"])
    except ValueError:
        raise CatalogError(f"{where}: unknown severity {fields['severity']!r} "
                           f"(one of {', '.join(s.value for s in Severity)})") from None
    return _code(code, severity, family, fields["title"], fields["explanation"], fields["fix"])


def register(codes: Iterable[Code], source: str) -> Catalog:
    """Register a parsed data file's codes, all or none (a code already declared elsewhere raises first)."""
    codes = tuple(codes)
    names = [c.code for c in codes]
    taken = sorted({name for name in names if name in _REGISTRY or names.count(name) > 1})
    if taken:
        where = ", ".join(sorted({_REGISTRY[name].family for name in taken if name in _REGISTRY} | {source}))
        raise CatalogError(f"{source}: finding code {', '.join(taken)} declared twice ({where})")
    entries = {c.code: c for c in codes}
    _REGISTRY.update(entries)
    return Catalog(source=source, entries=entries)


def catalog(module: str) -> Catalog:
    """Read and register the data file of catalog module ``module`` (``gapcheck.codes.lint`` -> ``lint.toml``)."""
    name = module.rpartition(".")[2] + ".toml"
    source = f"gapcheck/codes/{name}"
    try:
        text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{source}: cannot be read ({exc}); is the package data installed?") from None
    return register(parse_catalog(text, source), source)


def _load_all() -> None:
    for module in FAMILIES:
        importlib.import_module(module)


def all_codes() -> tuple[Code, ...]:
    """Every registered code, sorted by family then code."""
    _load_all()
    return tuple(sorted(_REGISTRY.values(), key=lambda c: (c.family, c.code)))


def lookup(code: str) -> Code | None:
    """The registered entry for ``code`` (case-insensitive), or None."""
    _load_all()
    return _REGISTRY.get(code) or _REGISTRY.get(code.lower()) or _REGISTRY.get(code.upper())


def is_documented(entry: Code) -> bool:
    """A code is documented when it has a title, an explanation of a sentence or more, and a fix."""
    return bool(entry.title) and len(entry.explanation) >= 20 and bool(entry.fix)


def markdown() -> str:
    """Every registered code as Markdown (docs/codes.md is generated from this by scripts/gen_codes_doc.py)."""
    lines = ["# Finding codes", "",
             "Generated from the registry (`gapcheck/codes/`) by `python scripts/gen_codes_doc.py`; do not edit by hand.",
             "`gapcheck explain CODE` prints the same text. The severity is the default; a finding may carry another",
             "where its weight depends on context (the explanation says when).", ""]
    codes = all_codes()
    families = list(dict.fromkeys(c.family for c in codes))
    for family in families:
        members = [c for c in codes if c.family == family]
        lines += [f"## {family}", "", "| code | severity | title |", "|---|---|---|"]
        lines += [f"| `{c.code}` | {c.severity.value} | {_cell(c.title)} |" for c in members]
        lines.append("")
        for c in members:
            lines += [f"### `{c.code}`", "", c.explanation, "", f"**Fix:** {c.fix}", ""]
    return "\n".join(lines).rstrip() + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
