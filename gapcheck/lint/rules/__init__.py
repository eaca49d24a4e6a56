"""Rules: one small class per risk, grouped in one module per family.

A rule names its :class:`~gapcheck.codes.Code` (the only place its identity, severity and
documentation live), optionally the loop :class:`~gapcheck.lint.facts.Aspect` a framework takes
over (the engine does not run it in modules where one does), and yields findings from
:meth:`Rule.check`. Adding a rule is one class plus one entry in its module's ``RULES``.
"""
from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from gapcheck.codes import Code
from gapcheck.findings import Finding, Severity, Subject
from gapcheck.lint.facts import Aspect
from gapcheck.lint.symbols import ModuleIndex, Program

#: One module per family; each defines ``RULES``.
RULE_MODULES: tuple[str, ...] = (
    "gapcheck.lint.rules.leakage",
    "gapcheck.lint.rules.ddp",
    "gapcheck.lint.rules.amp",
    "gapcheck.lint.rules.evaluation",
    "gapcheck.lint.rules.loading",
    "gapcheck.lint.rules.reproducibility",
    "gapcheck.lint.rules.hpo",
    "gapcheck.lint.rules.hygiene",
)


@dataclass
class Context:
    """What a rule sees: the module being linted, the program around it, and the entry points."""

    program: Program
    module: ModuleIndex
    managed: frozenset[Aspect]
    entry_functions: frozenset[str] = frozenset()
    #: The oldest torch the project runs on (``--target-torch`` or its declared requirement); None: unknown.
    torch_floor: tuple[int, ...] | None = None

    def finding(self, code: Code, node: ast.AST, message: str, severity: Severity | None = None,
                **evidence: Any) -> Finding:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0) + 1
        return code.finding(message, subject=Subject(path=self.module.source.display, line=line, col=col),
                            evidence=evidence, severity=severity)


class Rule:
    code: ClassVar[Code]
    aspect: ClassVar[Aspect | None] = None
    #: Text the source must contain for the rule to possibly fire (any one of them): a cheap pre-filter.
    needs: ClassVar[tuple[str, ...]] = ()

    def applies(self, ctx: Context) -> bool:
        text = ctx.module.source.text
        return not self.needs or any(word in text for word in self.needs)

    def check(self, ctx: Context) -> Iterator[Finding]:  # pragma: no cover - every rule overrides it
        raise NotImplementedError


@functools.lru_cache(maxsize=1)
def all_rules() -> tuple[Rule, ...]:
    """One instance of every rule, in code order."""
    rules: list[Rule] = []
    for name in RULE_MODULES:
        rules.extend(cls() for cls in importlib.import_module(name).RULES)
    return tuple(sorted(rules, key=lambda r: r.code.code))
