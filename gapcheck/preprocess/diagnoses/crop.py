"""Crop: the stages cut different regions (center crop vs direct resize, another crop ratio)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import CROP
from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import ReplayedDiagnosis

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Pair


class CropDiagnosis(ReplayedDiagnosis):
    """Compares the geometries replay found for each stage on the same raw sample."""

    code = CROP

    def diagnose(self, pair: "Pair") -> Finding | None:
        assert pair.replay is not None
        index, pr, pc = pair.replay
        if (pr.geometry.kind, pr.geometry.shorter_side) == (pc.geometry.kind, pc.geometry.shorter_side):
            return None
        return pair.finding(self.code, f"{pair.cand} does '{pc.geometry.label}', {pair.ref} does '{pr.geometry.label}'",
                            sample=pair.evidence[index].sample, ref_geometry=pr.geometry.label,
                            cand_geometry=pc.geometry.label, cand_replay_psnr_db=pc.psnr_db,
                            ref_replay_psnr_db=pr.psnr_db)
