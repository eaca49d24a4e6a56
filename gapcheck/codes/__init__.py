"""The one registry of finding codes.

Every code gapcheck can emit is declared exactly once, in the catalog module of its
family (``gapcheck/codes/<family>.py``), with its default severity, a one-line title, a
longer explanation and the usual fix — as TorchFix keeps its rules. ``gapcheck explain
CODE`` reads it; tests fail when a code is emitted that is not registered, or registered
without documentation.

Adding a code is one ``define(...)`` line in the family's catalog; adding a family is one
new catalog module plus one entry in :data:`FAMILIES`. Emit findings through the code
object so severity never drifts::

    from gapcheck.codes.export_diff import LAYER_DIVERGENCE
    LAYER_DIVERGENCE.finding("act introduces the error", subject=Subject(module="act"), evidence={...})

This package imports nothing heavy (no torch, numpy, onnx).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from gapcheck.findings import Finding, Severity, Subject

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


def define(code: str, severity: Severity, family: str, title: str, explanation: str, fix: str) -> Code:
    """Declare a code (called once, at import of its family's catalog). A second declaration is an error."""
    if code in _REGISTRY:
        raise RuntimeError(f"finding code {code!r} declared twice ({_REGISTRY[code].family} and {family})")
    entry = Code(code=code, severity=severity, family=family, title=title.strip(), explanation=" ".join(explanation.split()),
                 fix=" ".join(fix.split()))
    _REGISTRY[code] = entry
    return entry


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
