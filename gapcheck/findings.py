"""Findings: the one value every check produces and every report renders.

A :class:`Finding` carries a registered ``code`` (see :mod:`gapcheck.codes`), a
:class:`Severity`, a structured :class:`Subject` (what the finding is about: a module,
a stage pair and sample, an endpoint and output, a file:line:col), the evidence (numbers
that prove it) and one sentence for a person. Its :attr:`Finding.fingerprint` is stable
across runs (code + subject, never the numbers), so the nightly history and SARIF can say
"the same finding as last night". This module imports nothing heavy.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any


class Severity(str, Enum):
    INFO = "info"  # worth knowing, not a gap (e.g. a module fused away by the exporter)
    WARNING = "warning"  # suspicious, does not change the verdict
    GAP = "gap"  # a behaviour gap: the verdict is "gap" and the exit code 1


class Verdict(str, Enum):
    PASS = "pass"
    GAP = "gap"

    @classmethod
    def of(cls, findings: Iterable["Finding"]) -> "Verdict":
        """GAP when any finding is a gap, else PASS."""
        return cls.GAP if any(f.is_gap for f in findings) else cls.PASS


@dataclass(frozen=True)
class Subject:
    """What a finding is about. Every field is optional; commands fill the ones that apply.

    - export-diff: ``module`` (and ``output`` for a model output, ``endpoint`` for a backend)
    - preprocess-audit: ``stage`` (a pair is ``"train→infer"``), ``step``, ``sample``
    - nightly / triton: ``endpoint``, ``output``
    - data: ``path`` (the item) and ``other`` (the item it collides with), ``group``
    - lint: ``path``, ``line``, ``col``
    """

    module: str | None = None
    stage: str | None = None
    step: str | None = None
    sample: str | None = None
    endpoint: str | None = None
    output: str | None = None
    path: str | None = None
    line: int | None = None
    col: int | None = None
    other: str | None = None
    group: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Only the fields that are set (the JSON form)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def describe(self) -> str:
        """A short human location, e.g. ``layer1.0.conv1``, ``train→infer / step 2 / cat.png``, ``a.py:3:1``."""
        if self.path is not None and self.line is not None:
            where = f"{self.path}:{self.line}" + (f":{self.col}" if self.col is not None else "")
            return where
        parts = [self.endpoint, self.module, self.stage, self.step, self.output, self.path, self.group, self.sample]
        text = " / ".join(str(p) for p in parts if p is not None)
        return f"{text} ↔ {self.other}" if self.other is not None else text


@dataclass(frozen=True)
class Finding:
    """One thing gapcheck found.

    ``code`` is a registered code (``gapcheck explain CODE``); build findings through the
    registry (``codes.LAYER_DIVERGENCE.finding(...)``) so the severity and family come from
    one place. ``where`` is the human location; when empty it is derived from ``subject``.
    """

    code: str
    severity: Severity
    message: str
    where: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    subject: Subject = field(default_factory=Subject)

    def __post_init__(self) -> None:
        if not self.where:
            object.__setattr__(self, "where", self.subject.describe())

    @property
    def is_gap(self) -> bool:
        return self.severity is Severity.GAP

    @property
    def fingerprint(self) -> str:
        """Stable identity across runs: SHA256 of the code and the subject (not the numbers, not the wording)."""
        key = json.dumps({"code": self.code, "subject": self.subject.as_dict()}, sort_keys=True, default=str)
        return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def verdict_of(findings: Iterable[Finding]) -> Verdict:
    """:attr:`Verdict.GAP` when any finding is a gap, else :attr:`Verdict.PASS` (a str enum: compares equal to "gap"/"pass")."""
    return Verdict.of(findings)
