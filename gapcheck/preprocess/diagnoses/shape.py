"""Shape: the stages hand the model tensors of different shapes (an extra batch dimension, another size)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import SHAPE
from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import FirstSampleDiagnosis
from gapcheck.preprocess.layout import detect_layout, lone_channel_apart

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Evidence, Pair


class ShapeDiagnosis(FirstSampleDiagnosis):
    """Leading batch dimensions and the canonical (C, H, W) size, read from the first evidence sample."""

    code = SHAPE

    def on_first(self, pair: "Pair", ev: "Evidence") -> Finding | None:
        """Another (C, H, W) is a gap; a leading batch axis of size 1 on one side only is not (the outputs are then
        compared with it squeezed, and the pair says so in an info), so it is only named next to a real difference."""
        ri, ci = detect_layout(ev.ref.shape), detect_layout(ev.cand.shape)
        rc, cc = pair.chw[0]
        if rc is None or cc is None:
            same = ev.ref.shape[ri.batch_dims:] == ev.cand.shape[ci.batch_dims:]
        else:
            same = rc.shape == cc.shape
        if same:
            return None
        reasons = []
        if ri.batch_dims != ci.batch_dims:
            reasons.append(f"{pair.cand} has {ci.batch_dims} leading batch dimension(s), {pair.ref} has {ri.batch_dims}")
        if lone_channel_apart(ri, ci):
            extra, plain = (pair.cand, pair.ref) if ri.layout == "HW" else (pair.ref, pair.cand)
            reasons.append(f"{extra} keeps a channel axis of size 1, {plain} outputs (H, W)")
        if rc is not None and cc is not None:
            reasons.append(f"{pair.cand} outputs {cc.shape[0]} channel(s) of {cc.shape[1]}x{cc.shape[2]}, "
                           f"{pair.ref} {rc.shape[0]} of {rc.shape[1]}x{rc.shape[2]}")
        reasons = reasons or [f"{pair.cand} and {pair.ref} output arrays of other shapes"]
        return pair.finding(self.code, f"{'; '.join(reasons)}: shapes {list(ev.cand.shape)} vs {list(ev.ref.shape)}",
                            sample=ev.sample, ref_shape=list(ev.ref.shape), cand_shape=list(ev.cand.shape),
                            ref_batch_dims=ri.batch_dims, cand_batch_dims=ci.batch_dims)
