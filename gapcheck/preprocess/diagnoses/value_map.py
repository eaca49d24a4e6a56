"""Value maps: scale (0–255 vs 0–1), normalization (per-channel mean/std) and dtype.

Each stage's values are explained as ``out_c = slope_c · raw + offset_c`` against the
8-bit raw pixels; written as ``(raw/255 - mean)/std`` that gives the implied
normalization constants a person recognises (e.g. ImageNet's 0.485/0.229).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCALE_FACTORS = (255.0, 1.0 / 255.0)


@dataclass(frozen=True)
class ImpliedNormalization:
    mean: tuple[float, ...]  # in [0, 1] units of the raw pixels
    std: tuple[float, ...]

    @classmethod
    def from_affine(cls, slope: tuple[float, ...], offset: tuple[float, ...]) -> "ImpliedNormalization":
        std = tuple(1.0 / (255.0 * a) if a else float("inf") for a in slope)
        mean = tuple(-b * s if np.isfinite(s) else float("nan") for b, s in zip(offset, std))
        return cls(tuple(round(m, 4) for m in mean), tuple(round(s, 4) for s in std))


@dataclass(frozen=True)
class ValueDifference:
    scale_factor: float | None  # cand × factor ≈ ref, when the slopes differ by 255 or 1/255
    normalization_differs: bool
    max_slope_ratio_error: float
    max_offset_gap: float  # in units of the reference range


def compare_affine(
    ref_slope: tuple[float, ...],
    ref_offset: tuple[float, ...],
    cand_slope: tuple[float, ...],
    cand_offset: tuple[float, ...],
    ref_range: float,
    rel_tol: float = 0.01,
) -> ValueDifference:
    """Classify how two per-channel affine maps (over the same raw values) differ."""
    ref_a, cand_a = np.asarray(ref_slope), np.asarray(cand_slope)
    ref_b, cand_b = np.asarray(ref_offset), np.asarray(cand_offset)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(cand_a != 0, ref_a / cand_a, np.inf)
    factor = None
    for candidate in SCALE_FACTORS:
        if np.all(np.abs(ratio / candidate - 1.0) < 0.02):
            factor = candidate
    # A scale bug multiplies the *input* (a missing /255 before normalize), so it changes the
    # slopes only: (x - m)/s vs (x/255 - m)/s. Offsets are compared as they are.
    corrected_a = cand_a * (factor or 1.0)
    corrected_b = cand_b
    ratio_error = float(np.max(np.abs(corrected_a / np.where(ref_a != 0, ref_a, 1.0) - 1.0)))
    # Offsets matter in output units: compare them to the reference's value range.
    offset_gap = float(np.max(np.abs(corrected_b - ref_b))) / (ref_range if ref_range > 0 else 1.0)
    normalization_differs = ratio_error > rel_tol or offset_gap > rel_tol
    return ValueDifference(factor, normalization_differs, ratio_error, offset_gap)


def describe_range(slope: tuple[float, ...]) -> str:
    """A person's name for a value scale: 0–255, 0–1, or normalized."""
    a = float(np.mean(slope)) if slope else 0.0
    if abs(a - 1.0) < 0.02:
        return "0–255"
    if abs(a * 255.0 - 1.0) < 0.02:
        return "0–1"
    return "normalized"
