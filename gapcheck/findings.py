"""Findings: the one value every check produces and every report renders."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    INFO = "info"  # worth knowing, not a gap (e.g. a module fused away by the exporter)
    WARNING = "warning"  # suspicious, does not change the verdict
    GAP = "gap"  # a behaviour gap: the verdict is "gap" and the exit code 1


@dataclass(frozen=True)
class Finding:
    """One thing gapcheck found.

    ``code`` is stable (reports and tests key on it), ``where`` names the place
    (module path, stage/step, file:line, endpoint), ``evidence`` carries the numbers
    that prove it, and ``message`` is one sentence for a person.
    """

    code: str
    severity: Severity
    message: str
    where: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def is_gap(self) -> bool:
        return self.severity is Severity.GAP


def verdict_of(findings: list[Finding] | tuple[Finding, ...]) -> str:
    """"gap" when any finding is a gap, else "pass"."""
    return "gap" if any(f.is_gap for f in findings) else "pass"
