"""The values ``preprocess_audit`` returns: frozen, renderer-ready, and truthy when the audit passes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.steps import StepDivergence
from gapcheck.preprocess.distribution import KSResult


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
class PreprocessAuditResult:
    verdict: str
    findings: tuple[Finding, ...]
    stages: tuple[StageRow, ...]
    pairs: tuple[PairResult, ...]
    ks: tuple[KSResult, ...]
    samples: tuple[SampleResult, ...]
    bad_samples: tuple[BadSample, ...]
    stage_errors: tuple[StageError, ...]
    settings: dict[str, Any]
    worst_samples: tuple[WorstSample, ...] = ()
    channel_values: dict[str, np.ndarray] = field(default_factory=dict)  # stage -> (C, N) for histograms

    def __bool__(self) -> bool:
        return self.verdict == "pass"

    @property
    def audited_samples(self) -> int:
        from gapcheck.preprocess.samples import SKIPPED_INPUT_CODES

        return sum(1 for s in self.samples if s.stages and s.input_issue not in SKIPPED_INPUT_CODES)

    @property
    def summary(self) -> str:
        gaps = sum(1 for f in self.findings if f.is_gap)
        return (f"{self.audited_samples}/{len(self.samples)} samples audited through {len(self.stages)} stages, "
                f"{gaps} gap finding(s), {len(self.bad_samples)} bad input(s), {len(self.stage_errors)} stage error(s)")

    def json_payload(self) -> dict[str, Any]:
        """Everything but the display arrays (images, histogram values), for --json."""
        return {
            "verdict": self.verdict,
            "summary": self.summary,
            "settings": self.settings,
            "findings": list(self.findings),
            "stages": list(self.stages),
            "pairs": list(self.pairs),
            "ks": list(self.ks),
            "bad_samples": list(self.bad_samples),
            "stage_errors": list(self.stage_errors),
            "samples": list(self.samples),
        }
