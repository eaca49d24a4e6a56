"""The rows of a preprocess audit's result: per stage, per stage pair, per sample (frozen values, no logic).

They sit below the result and its views (:mod:`gapcheck.preprocess.result`), which read them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def pair_label(ref: str, cand: str) -> str:
    """The structured name of a stage pair, as findings carry it in ``Subject.stage``."""
    return f"{ref}→{cand}"


@dataclass(frozen=True)
class StepSummary:
    """One step's output, fingerprinted and summarized like a stage output."""

    index: int  # 1-based, in the stage's own step list
    label: str
    sha256: str
    shape: tuple[int, ...]
    dtype: str
    min: float
    max: float
    mean: float


@dataclass(frozen=True)
class StepDivergence:
    step_index: int  # 1-based index in the candidate's step list
    ref_step: str
    cand_step: str
    sample: str
    method: str = "steps"  # how the steps were found: "steps" (declared) or ref/cand trace methods, e.g. "runtime/fx"
    max_abs: float | None = None  # at the divergent step; None when shapes differ there
    opaque: tuple[str, ...] = ()  # parts of either stage observed only at their boundaries
    fallback: tuple[str, ...] = ()  # why torch.fx was not used, per stage ("infer: ...")
    ref_steps: tuple[StepSummary, ...] = ()
    cand_steps: tuple[StepSummary, ...] = ()


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
    """An evidence sample of a failing pair (the worst or a typical differing one), as display images (HWC or HW,
    0..1: the raw file and both stage outputs, de-normalized where replay knows the value map) and a |Δ| map."""

    ref: str
    cand: str
    sample: str
    max_abs: float
    psnr_db: float
    ref_image: np.ndarray
    cand_image: np.ndarray
    diff: np.ndarray | None
    role: str = "worst"  # "worst" | "typical"
    differing: int = 0  # samples on which the pair differs
    compared: int = 0  # of how many compared
    raw_image: np.ndarray | None = None  # the raw file as PIL decodes it (no EXIF orientation applied)
    display: str = ""  # how the outputs were made viewable
