"""The catch-all, run last: what the named causes do not account for, with its size."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import (
    ALPHA_COMPOSITE,
    CHANNEL_ORDER,
    CROP,
    DTYPE,
    GRAYSCALE_CONVERSION,
    LAYOUT,
    NORMALIZATION,
    ORIENTATION,
    PALETTE_INDICES,
    RESIZE,
    SCALE,
    SHAPE,
    SIZE_ROUNDING,
    UNEXPLAINED,
)
from gapcheck.findings import Finding

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Pair

SOURCE_CODES = (ORIENTATION, ALPHA_COMPOSITE, PALETTE_INDICES, GRAYSCALE_CONVERSION)  # the file read another way
VALUE_CODES = (CHANNEL_ORDER, SCALE, NORMALIZATION, RESIZE, CROP, SIZE_ROUNDING, *SOURCE_CODES)
STRUCTURE_CODES = (SHAPE, LAYOUT, DTYPE)


class UnexplainedDiagnosis:
    """Reads ``pair.found``: reports a difference no earlier diagnosis named, or a residual they leave."""

    code = UNEXPLAINED
    reads_values = True  # on NaN outputs the nonfinite_output finding is the explanation

    def applies(self, pair: "Pair") -> bool:
        return not pair.evidence or pair.finite

    def diagnose(self, pair: "Pair") -> Finding | None:
        size = pair.observed_max_abs
        if not pair.evidence:
            return pair.finding(self.code, f"{pair.cand} differs from {pair.ref} but no sample has both outputs to "
                                "diagnose", max_abs=size)
        if pair.structure_only:
            return None if pair.found else pair.finding(
                self.code, f"{pair.cand} and {pair.ref} differ only below the canonical (C, H, W) view",
                sample=pair.evidence[0].sample, max_abs=size)
        if pair.colour_apart:
            return None  # grayscale against colour: the shape finding names the conversion and weighs the luminance
        if pair.replay is not None:
            return self._after_replay(pair)
        if pair.has(*VALUE_CODES):
            return None
        return pair.finding(self.code, f"{pair.cand} differs from {pair.ref} by max |Δ| {size:.4g}; no channel order, "
                            "layout, scale, normalization, resize, crop or dtype hypothesis reproduces it",
                            sample=pair.evidence[0].sample, max_abs=size)

    def _after_replay(self, pair: "Pair") -> Finding | None:
        assert pair.replay is not None
        index, pr, pc = pair.replay
        sample = pair.evidence[index].sample
        residual = pair.replay_residual
        # the replay reads the file the default way: a stage that reads it another way leaves a residual there
        if residual is not None and residual > pair.tolerance and not pair.has(RESIZE, CROP, SIZE_ROUNDING,
                                                                               *SOURCE_CODES) \
                and not _gray_weights_swapped(pair):
            return pair.finding(self.code, f"after undoing the named causes, {pair.cand} still differs from {pair.ref} "
                                f"by {residual:.3g} of the value range", sample=sample, residual_max_abs_rel=residual,
                                max_abs=pair.observed_max_abs)
        if pair.has(*VALUE_CODES):
            return None
        return pair.finding(self.code, f"{pair.cand} differs from {pair.ref} (max |Δ| {pair.observed_max_abs:.4g}) but "
                            "both replay to the same geometry, method, channel order and value map", sample=sample,
                            max_abs=pair.observed_max_abs, ref_psnr_db=pr.psnr_db, cand_psnr_db=pc.psnr_db)


def _gray_weights_swapped(pair: "Pair") -> bool:
    """A grayscale made with BGR weights is a reading of the file too (named channel_order by the source diagnosis):
    the replay on PIL's grayscale leaves its residual, which that finding explains."""
    return any(f.code == str(CHANNEL_ORDER) and f.evidence.get("conversion") == "grayscale" for f in pair.found)
