"""Dtype: the stages hand the model different element types (uint8 vs float32, float64 vs float32)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import DTYPE
from gapcheck.findings import Finding

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Pair


class DtypeDiagnosis:
    code = DTYPE
    reads_values = False

    def applies(self, pair: "Pair") -> bool:
        return pair.first is not None

    def diagnose(self, pair: "Pair") -> Finding | None:
        ev = pair.first
        assert ev is not None
        if ev.ref.dtype == ev.cand.dtype:
            return None
        return pair.finding(self.code, f"{pair.cand} outputs {ev.cand.dtype}, {pair.ref} outputs {ev.ref.dtype}",
                            sample=ev.sample, ref_dtype=str(ev.ref.dtype), cand_dtype=str(ev.cand.dtype))
