"""Dtype: the stages hand the model different element types (uint8 vs float32, float64 vs float32)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import DTYPE
from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import FirstSampleDiagnosis

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Evidence, Pair


class DtypeDiagnosis(FirstSampleDiagnosis):
    code = DTYPE

    def on_first(self, pair: "Pair", ev: "Evidence") -> Finding | None:
        if ev.ref.dtype == ev.cand.dtype:
            return None
        return pair.finding(self.code, f"{pair.cand} outputs {ev.cand.dtype}, {pair.ref} outputs {ev.ref.dtype}",
                            sample=ev.sample, ref_dtype=str(ev.ref.dtype), cand_dtype=str(ev.cand.dtype))
