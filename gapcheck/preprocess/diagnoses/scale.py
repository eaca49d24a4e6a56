"""Scale: one stage's values are the other's times 255 (a missing or doubled ``/255``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gapcheck.codes.preprocess import SCALE
from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import ValueMapDiagnosis
from gapcheck.preprocess.diagnoses.value_map import SCALE_FACTORS

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Pair


def direct_scale_factor(slope: tuple[float, ...]) -> float | None:
    """The factor (255 or 1/255) a direct candidate→reference fit's slopes all agree on, if any."""
    values = np.asarray(slope)
    return next((f for f in SCALE_FACTORS if np.all(np.abs(values / f - 1.0) < 0.02)), None)


class ScaleDiagnosis(ValueMapDiagnosis):
    code = SCALE

    def diagnose(self, pair: "Pair") -> Finding | None:
        if pair.replay is not None and pair.replayed_values is not None:
            index, pr, pc = pair.replay
            diff = pair.replayed_values
            if diff.scale_factor is None:
                return None
            factor = ("×255 larger (0–255 input where 0–1 is expected)" if diff.scale_factor < 1
                      else "255× smaller (0–1 input where 0–255 is expected)")
            return pair.finding(self.code, f"{pair.cand}'s values are {factor} than {pair.ref}'s",
                                sample=pair.evidence[index].sample, factor_cand_to_ref=diff.scale_factor,
                                ref_slope=list(pr.fit.slope), cand_slope=list(pc.fit.slope),
                                replayed_residual_max_abs_rel=pair.replay_residual)
        assert pair.direct_fit is not None
        fit, residual = pair.direct_fit
        factor_ = direct_scale_factor(fit.slope)
        if factor_ is None:
            return None
        return pair.finding(self.code, f"{pair.cand} × {factor_:.6g} reproduces {pair.ref}", sample=pair.evidence[0].sample,
                            factor_cand_to_ref=factor_, offsets=list(fit.offset), residual_max_abs_rel=residual)
