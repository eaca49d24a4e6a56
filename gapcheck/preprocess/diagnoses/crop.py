"""Crop: the stages cut different regions (center crop vs direct resize, another crop ratio)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import CROP
from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import ReplayedDiagnosis

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Pair
    from gapcheck.preprocess.replay import StageProfile


class CropDiagnosis(ReplayedDiagnosis):
    """Compares the geometries replay found for each stage on the same raw sample."""

    code = CROP

    def diagnose(self, pair: "Pair") -> Finding | None:
        assert pair.replay is not None
        index, pr, pc = self._telling(pair) or pair.replay
        if (pr.geometry.kind, pr.geometry.shorter_side) == (pc.geometry.kind, pc.geometry.shorter_side):
            return None
        return pair.finding(self.code, f"{pair.cand} does '{pc.geometry.label}', {pair.ref} does '{pr.geometry.label}'",
                            sample=pair.evidence[index].sample, ref_geometry=pr.geometry.label,
                            cand_geometry=pc.geometry.label, cand_replay_psnr_db=pc.psnr_db,
                            ref_replay_psnr_db=pr.psnr_db)

    @staticmethod
    def _telling(pair: "Pair") -> tuple[int, "StageProfile", "StageProfile"] | None:
        """On a square picture a squash (both sides to S) is a shorter-side resize to S: when the replayed sample is
        square, an evidence sample that is not tells them apart (timm's crop_mode='squash' named as such)."""
        assert pair.replay is not None
        first = pair.evidence[pair.replay[0]]
        if first.raw_rgb is None or first.raw_rgb.shape[0] != first.raw_rgb.shape[1]:
            return None
        for index, ev in enumerate(pair.evidence):
            if ev.raw_rgb is not None and ev.raw_rgb.shape[0] != ev.raw_rgb.shape[1]:
                pr, pc = pair.profiles(ev)
                if pr is not None and pc is not None:
                    return index, pr, pc
        return None
