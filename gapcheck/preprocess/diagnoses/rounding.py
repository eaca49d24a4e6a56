"""Size rounding: a shorter-side resize whose longer side is truncated (int) in one stage and rounded in the other.

Seen two ways: after a center crop the shapes agree and replay finds the same geometry with the
other rounding (a one-pixel larger resize shifts every pixel a little); without a crop the output
shapes differ by one pixel on the longer side, exactly where ``int(x)`` and ``round(x)`` differ.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gapcheck.codes.preprocess import SIZE_ROUNDING
from gapcheck.findings import Finding
from gapcheck.preprocess.diagnoses.base import first_found
from gapcheck.preprocess.imageops import shorter_side_size
from gapcheck.preprocess.layout import detect_layout, spatial_shape

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Evidence, Pair


def _rounding_of(raw_hw: tuple[int, int], out_hw: tuple[int, int]) -> str | None:
    """"int" or "round" when ``out_hw`` is a shorter-side resize of ``raw_hw`` that only one of them gives."""
    shorter = min(out_hw)
    sizes = {rounding: shorter_side_size(raw_hw[0], raw_hw[1], shorter, rounding) for rounding in ("int", "round")}
    if sizes["int"] == sizes["round"]:
        return None
    return next((r for r, size in sizes.items() if size == out_hw), None)


class SizeRoundingDiagnosis:
    code = SIZE_ROUNDING
    reads_values = False  # the unresized shapes decide it too; replay is used only when it exists

    def applies(self, pair: "Pair") -> bool:
        return bool(pair.evidence)

    def diagnose(self, pair: "Pair") -> Finding | None:
        if pair.replay is not None:
            index, pr, pc = pair.replay
            same_size = (pr.geometry.kind, pr.geometry.shorter_side) == (pc.geometry.kind, pc.geometry.shorter_side)
            if pr.geometry.kind == "resize_crop" and same_size and pr.geometry.rounding != pc.geometry.rounding:
                return self._finding(pair, pair.evidence[index], pr.geometry.rounding, pc.geometry.rounding,
                                     f"then center crop {pc.geometry.out_height}x{pc.geometry.out_width}")
        return first_found(pair.evidence, lambda ev: self._from_shapes(pair, ev))

    def _from_shapes(self, pair: "Pair", ev: "Evidence") -> Finding | None:
        if ev.raw_rgb is None:
            return None
        ref_hw, cand_hw = spatial_shape(detect_layout(ev.ref.shape)), spatial_shape(detect_layout(ev.cand.shape))
        if ref_hw is None or cand_hw is None or ref_hw == cand_hw or min(ref_hw) != min(cand_hw):
            return None
        raw_hw = (int(ev.raw_rgb.shape[0]), int(ev.raw_rgb.shape[1]))
        ref_rounding, cand_rounding = _rounding_of(raw_hw, ref_hw), _rounding_of(raw_hw, cand_hw)
        if ref_rounding is None or cand_rounding is None or ref_rounding == cand_rounding:
            return None
        return self._finding(pair, ev, ref_rounding, cand_rounding,
                             f"giving {'x'.join(map(str, cand_hw))} vs {'x'.join(map(str, ref_hw))}")

    def _finding(self, pair: "Pair", ev: "Evidence", ref_rounding: str, cand_rounding: str, then: str) -> Finding:
        def how(rounding: str) -> str:
            return "truncates it with int() (as torchvision's Resize does)" if rounding == "int" else "rounds it with round()"

        exact = f" (the raw image is {ev.raw_rgb.shape[0]}x{ev.raw_rgb.shape[1]})" if ev.raw_rgb is not None else ""
        return pair.finding(
            self.code, f"the shorter-side resize computes the longer side differently: {pair.cand} {how(cand_rounding)}, "
                       f"{pair.ref} {how(ref_rounding)}{exact}, {then}; only images whose scaled longer side has a "
                       "fraction ≥ .5 differ", sample=ev.sample, ref_rounding=ref_rounding, cand_rounding=cand_rounding)
