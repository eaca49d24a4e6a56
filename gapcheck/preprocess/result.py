"""The values ``preprocess_audit`` returns: frozen, truthy when the audit passes, and a
:class:`~gapcheck.report.contract.CommandResult` (JSON sections, views for console and HTML,
checks for JUnit). Every decision a report shows — which stage-table cells differ, which
findings belong to which stage pair — is made here, once; renderers only format.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from gapcheck.findings import Finding
from gapcheck.preprocess.distribution import KSResult
from gapcheck.preprocess.rows import (
    BadSample,
    PairResult,
    SampleResult,
    StageError,
    StageOutcome,
    StageRow,
    WorstSample,
)
from gapcheck.report.contract import Chart, Check, ResultBase, Table


@dataclass(frozen=True)
class PreprocessAuditResult(ResultBase):
    findings: tuple[Finding, ...] = field()  # field(): no default (ResultBase has a class-level one)
    stages: tuple[StageRow, ...]
    pairs: tuple[PairResult, ...]
    ks: tuple[KSResult, ...]
    samples: tuple[SampleResult, ...]
    bad_samples: tuple[BadSample, ...]
    stage_errors: tuple[StageError, ...]
    settings: dict[str, Any]
    worst_samples: tuple[WorstSample, ...] = ()
    channel_values: dict[str, np.ndarray] = field(default_factory=dict)  # stage -> (C, N) for histograms
    seconds: dict[str, float] = field(default_factory=dict)  # phase -> wall seconds (disjoint: they add up)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # "parent", "workers" -> CPU seconds
    command: str = field(default="preprocess-audit", init=False)

    def __bool__(self) -> bool:
        return self.verdict == "pass"

    @property
    def audited_samples(self) -> int:
        from gapcheck.preprocess.samples import SKIPPED_INPUT_CODES

        skipped = {str(c) for c in SKIPPED_INPUT_CODES}
        return sum(1 for s in self.samples if s.stages and s.input_issue not in skipped)

    @property
    def headline(self) -> str:
        gaps = [f.code for f in self.findings if f.is_gap]
        return (f"{self.audited_samples}/{len(self.samples)} samples audited through {len(self.stages)} stages, "
                f"{len(gaps)} gap finding(s)" + (f" ({', '.join(sorted(set(gaps)))})" if gaps else "")
                + f", {len(self.bad_samples)} bad input(s), {len(self.stage_errors)} stage error(s)")

    @property
    def summary(self) -> str:
        return self.headline

    @property
    def timings(self) -> Mapping[str, float]:
        return dict(self.seconds)

    def sections(self) -> dict[str, Any]:
        """The command's JSON sections (the envelope adds verdict, headline, findings, timings)."""
        return {
            "settings": self.settings,
            "stages": list(self.stages),
            "pairs": list(self.pairs),
            "ks": list(self.ks),
            "bad_samples": list(self.bad_samples),
            "stage_errors": list(self.stage_errors),
            "samples": list(self.samples),
            "cpu_seconds": dict(self.cpu_seconds),
        }

    def views(self) -> Sequence[Table | Chart]:
        from gapcheck.preprocess import views

        return views.all_views(self)

    def checks(self) -> Sequence[Check]:
        from gapcheck.preprocess import views

        return views.checks(self)

    def json_payload(self) -> dict[str, Any]:
        """The sections plus verdict, summary and findings (the pre-envelope JSON shape)."""
        return {"verdict": self.verdict.value, "summary": self.summary, "findings": list(self.findings),
                **self.sections()}
