"""Normalization: the stages apply different per-channel (x - mean) / std constants."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gapcheck.codes.preprocess import NORMALIZATION
from gapcheck.findings import Finding
from gapcheck.preprocess.affine import AffineFit, is_identity
from gapcheck.preprocess.diagnoses.base import ValueMapDiagnosis
from gapcheck.preprocess.diagnoses.scale import direct_scale_factor
from gapcheck.preprocess.diagnoses.value_map import ImpliedNormalization

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Pair

IDENTITY_EPS = 1e-3  # a direct fit this close to slope 1, offset 0 maps nothing


def same_map_after_swap(fit: AffineFit, value_range: float, rel_tol: float = 0.01) -> bool:
    """Whether a direct candidate→reference fit with a channel permutation is just the permutation: both stages
    apply the same per-channel map ``N`` and the candidate's channels came in swapped (``cand = N(P·x)``,
    ``ref = N(x)``).

    Then the fitted map of output channel ``c`` is ``N_c ∘ N_k⁻¹`` with ``k = perm[c]``: slope ``a_c/a_k``, not 1,
    which read alone looks like another normalization (BGR under RGB's mean/std gave "mean [0.35, 0, -0.35]").
    Undoing the permutation, the maps composed around each cycle of it give ``N_c ∘ N_c⁻¹``, the identity; a
    normalization that really differs leaves a slope ≠ 1 or an offset there.
    """
    perm, seen = fit.perm, set()
    for start in range(len(perm)):
        if start in seen:
            continue
        slope, offset, c = 1.0, 0.0, start
        while c not in seen:  # compose f_start ∘ f_perm[start] ∘ ... around the cycle
            seen.add(c)
            slope, offset = slope * fit.slope[c], slope * fit.offset[c] + offset
            c = perm[c]
        if abs(slope - 1.0) > rel_tol or abs(offset) > rel_tol * (value_range or 1.0):
            return False
    return True


class NormalizationDiagnosis(ValueMapDiagnosis):
    """Names the implied mean/std of both stages (in 0–1 pixel units) from their replayed value maps."""

    code = NORMALIZATION

    def diagnose(self, pair: "Pair") -> Finding | None:
        return self._replayed(pair) if pair.replay is not None else self._direct(pair)

    def _replayed(self, pair: "Pair") -> Finding | None:
        assert pair.replay is not None and pair.replayed_values is not None
        index, pr, pc = pair.replay
        diff = pair.replayed_values
        if not diff.normalization_differs:
            return None
        ref, cand = (ImpliedNormalization.from_affine(p.fit.slope, p.fit.offset) for p in (pr, pc))
        return pair.finding(self.code, f"{pair.cand} normalizes with mean {list(cand.mean)} std {list(cand.std)}, "
                            f"{pair.ref} with mean {list(ref.mean)} std {list(ref.std)} (implied, for pixels in 0–1)",
                            sample=pair.evidence[index].sample, ref_implied_mean=list(ref.mean),
                            ref_implied_std=list(ref.std), cand_implied_mean=list(cand.mean),
                            cand_implied_std=list(cand.std), slope_mismatch=diff.max_slope_ratio_error,
                            offset_gap_of_range=diff.max_offset_gap, replayed_residual_max_abs_rel=pair.replay_residual)

    def _direct(self, pair: "Pair") -> Finding | None:
        assert pair.direct_fit is not None
        fit, residual = pair.direct_fit
        if direct_scale_factor(fit.slope) is not None:
            return None  # a pure ×255 / ÷255 is the scale diagnosis
        slope, offset = np.asarray(fit.slope), np.asarray(fit.offset)
        if not (np.any(np.abs(slope - 1.0) > IDENTITY_EPS) or np.any(np.abs(offset) > IDENTITY_EPS)):
            return None
        if not is_identity(fit.perm) and same_map_after_swap(fit, pair.ranges[0]):
            return None  # one cause: the same normalization on swapped channels (the channel_order finding)
        mean = [round(-b / a, 4) if a else float("nan") for a, b in zip(fit.slope, fit.offset, strict=True)]
        std = [round(1.0 / a, 4) if a else float("inf") for a in fit.slope]
        return pair.finding(self.code, f"(x - mean)/std with mean {mean}, std {std} (in {pair.cand}'s units) maps "
                            f"{pair.cand} onto {pair.ref}", sample=pair.evidence[0].sample, cand_to_ref_mean=mean,
                            cand_to_ref_std=std, residual_max_abs_rel=residual)
