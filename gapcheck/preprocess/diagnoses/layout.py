"""Layout: HWC vs CHW, the same values in another axis order (the views are :mod:`gapcheck.preprocess.layout`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import LAYOUT
from gapcheck.preprocess.diagnoses.base import FirstSampleDiagnosis
from gapcheck.preprocess.layout import colour_apart, detect_layout, lone_channel_apart

if TYPE_CHECKING:
    from gapcheck.findings import Finding
    from gapcheck.preprocess.diagnoses.base import Evidence, Pair


class LayoutDiagnosis(FirstSampleDiagnosis):
    """HWC vs CHW: the same values in another axis order (read from the shapes, so it also holds on NaN outputs)."""

    code = LAYOUT

    def on_first(self, pair: "Pair", ev: "Evidence") -> "Finding | None":
        ri, ci = detect_layout(ev.ref.shape), detect_layout(ev.cand.shape)
        if ri.layout == ci.layout or "unknown" in (ri.layout, ci.layout) or lone_channel_apart(ri, ci):
            return None  # (H, W) against (1, H, W) / (H, W, 1): compared squeezed, the pair's info says so
        if colour_apart(ri, ci):
            return None  # grayscale against colour: a lone plane has no layout to transpose; shape names the conversion
        return pair.finding(self.code, f"{pair.cand} is {ci.layout}, {pair.ref} is {ri.layout}; transposing "
                            f"{pair.cand} to {ri.layout} lines the channels up", sample=ev.sample,
                            ref_layout=ri.layout, cand_layout=ci.layout, ref_shape=list(ev.ref.shape),
                            cand_shape=list(ev.cand.shape))
