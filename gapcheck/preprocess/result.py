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
from gapcheck.preprocess.diagnoses.steps import StepDivergence
from gapcheck.preprocess.distribution import KSResult
from gapcheck.report.contract import Chart, Check, ResultBase, Table


@dataclass(frozen=True)
class StageRow:
    """One row of the stage table, aggregated over every sample the stage processed."""

    stage: str
    description: str
    augmented: bool
    ok_samples: int
    failed_samples: int
    shapes: tuple[str, ...]
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    min: float
    max: float
    channel_mean: tuple[float, ...]
    channel_std: tuple[float, ...]
    resize_method: str
    deterministic: bool | None  # None when not probed


@dataclass(frozen=True)
class PairResult:
    """Per-sample deltas between two stages, joined by raw sample."""

    ref: str
    cand: str
    compared_samples: int
    comparable_samples: int  # same shape
    max_abs: float
    min_psnr_db: float
    mean_psnr_db: float
    within_tolerance: bool
    worst_sample: str
    diagnosed: bool  # root causes were searched for this pair
    note: str = ""
    first_divergent_step: StepDivergence | None = None
    nonfinite_samples: int = 0  # samples left out because a stage output NaN/inf there

    @property
    def label(self) -> str:
        """The pair as findings name it in ``Subject.stage``."""
        from gapcheck.preprocess.diagnoses.base import pair_label

        return pair_label(self.ref, self.cand)


@dataclass(frozen=True)
class StageOutcome:
    stage: str
    ok: bool
    sha256: str = ""
    shape: tuple[int, ...] = ()
    dtype: str = ""
    layout: str = ""
    min: float = float("nan")
    max: float = float("nan")
    channel_mean: tuple[float, ...] = ()
    channel_std: tuple[float, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class SampleResult:
    """Per sample: the raw bytes' SHA256 and, per stage, the output's fingerprint and statistics."""

    path: str
    raw_sha256: str
    size_bytes: int
    image: str  # "PNG RGB 512x512"
    input_issue: str  # "" or a bad-input code
    stages: tuple[StageOutcome, ...]


@dataclass(frozen=True)
class BadSample:
    path: str
    code: str
    detail: str
    skipped: bool  # True: never passed to a stage


@dataclass(frozen=True)
class StageError:
    stage: str
    sample: str
    error: str


@dataclass(frozen=True)
class WorstSample:
    """A sample where two stages disagree most, as display images (HWC, 0..1) and a |Δ| heatmap."""

    ref: str
    cand: str
    sample: str
    max_abs: float
    psnr_db: float
    ref_image: np.ndarray
    cand_image: np.ndarray
    diff: np.ndarray | None


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
