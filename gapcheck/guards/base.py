"""What every guard shares: the ``GuardError`` family, the raise/warn mode and the violation ledger.

A guard turns what it observes into a :class:`~gapcheck.findings.Finding` of a registered code
(:mod:`gapcheck.codes.guards`) and hands it to its :class:`Ledger`. A GAP finding is a
violation: in ``Mode.RAISE`` the ledger raises the guard's :class:`GuardError` subclass (the
finding rides along on the exception), in ``Mode.WARN`` it logs and counts. WARNING/INFO
findings are logged and kept, never raised. The ledger keeps a bounded list of findings, so a
guard left in warn mode for a million steps does not grow without limit.

This module imports nothing heavy (no torch): the pytest plugin imports it at start-up.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gapcheck.errors import ExitCode, GapcheckError, UsageError
from gapcheck.findings import Finding, Severity

logger = logging.getLogger("gapcheck.guards")

#: Findings kept per guard; later ones are counted, not stored.
MAX_KEPT_FINDINGS = 100


class Mode(str, Enum):
    RAISE = "raise"  # a violation raises the guard's GuardError
    WARN = "warn"  # a violation is logged and counted

    @classmethod
    def parse(cls, value: "Mode | str") -> "Mode":
        try:
            return cls(value)
        except ValueError:
            raise UsageError(f"guard mode must be 'raise' or 'warn', got {value!r}") from None


class GuardError(GapcheckError):
    """A runtime guard tripped. ``finding`` holds the code, the subject and the numbers."""

    exit_code = ExitCode.GAP_FOUND

    def __init__(self, finding: Finding, *, hint: str | None = None) -> None:
        super().__init__(finding.message, hint=hint)
        self.finding = finding
        self.report: Any = None  # the guard's result, when it has one to hand over (e.g. a ProfileReport)


class GradientError(GuardError):
    """Non-finite, all-zero or missing gradients."""


class NonFiniteError(GuardError):
    """A forward output holds NaN or Inf."""


class ScalerError(GuardError):
    """The GradScaler skips most steps or its scale collapsed."""


class EvalModeError(GuardError):
    """Validation changed BatchNorm statistics or ran in train mode."""


class OverlapError(GuardError):
    """The same sample is in two dataset splits."""


class InputContractError(GuardError):
    """A model input breaks its declared dtype/range/layout contract."""


class DeterminismError(GuardError):
    """Two identically seeded training runs end with different weights."""


class TrialLeakError(GuardError):
    """A trial left tensor memory alive after cleanup."""


class StarvedLoopError(GuardError):
    """Data loading takes more of the step than allowed."""


def check_every(every: int) -> int:
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise UsageError(f"every must be an integer >= 1, got {every!r}")
    return every


@dataclass
class Ledger:
    """A guard's violations: raise or log-and-count, and the findings it produced (bounded)."""

    mode: Mode
    error: type[GuardError]
    violations: int = 0
    findings: list[Finding] = field(default_factory=list)
    dropped: int = 0  # findings beyond MAX_KEPT_FINDINGS, counted only

    def report(self, *findings: Finding) -> None:
        """Keep ``findings``; each GAP is a violation. In RAISE mode, once all are kept and counted, the first GAP
        raises (so a result still lists everything one check found); in WARN mode each is logged and counted."""
        first_gap = None
        for finding in findings:
            if len(self.findings) < MAX_KEPT_FINDINGS:
                self.findings.append(finding)
            else:
                self.dropped += 1
            if finding.severity is not Severity.GAP:
                level = logging.INFO if finding.severity is Severity.INFO else logging.WARNING
                logger.log(level, "%s: %s", finding.code, finding.message)
                continue
            self.violations += 1
            first_gap = first_gap or finding
            if self.mode is Mode.WARN:
                logger.warning("%s (violation %d): %s", finding.code, self.violations, finding.message)
        if first_gap is not None and self.mode is Mode.RAISE:
            from gapcheck.codes import lookup

            entry = lookup(first_gap.code)
            raise self.error(first_gap, hint=entry.fix if entry else None)


class Guarded:
    """What every guard holding a :class:`Ledger` (as ``self.ledger``) answers: its violation count and findings."""

    ledger: Ledger

    @property
    def violations(self) -> int:
        return self.ledger.violations

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(self.ledger.findings)


def shorten(names: list[str] | tuple[str, ...], limit: int = 5) -> str:
    """``a, b, c (+4 more)``: names in messages stay one line."""
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")
