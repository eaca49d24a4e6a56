"""Shape: the stages hand the model tensors of different shapes (an extra batch dimension, another size, grayscale
against colour)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gapcheck.codes.preprocess import SHAPE
from gapcheck.findings import Finding
from gapcheck.preprocess.affine import describe_perm
from gapcheck.preprocess.diagnoses.base import FirstSampleDiagnosis
from gapcheck.preprocess.layout import LayoutInfo, channel_count, colour_apart, detect_layout
from gapcheck.preprocess.luminance import LUMAS, REPEATED, LumaMatch

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Evidence, GrayLuminance, Pair


class ShapeDiagnosis(FirstSampleDiagnosis):
    """Leading batch dimensions and the canonical (C, H, W) size, read from the first evidence sample."""

    code = SHAPE

    def on_first(self, pair: "Pair", ev: "Evidence") -> Finding | None:
        """Another (C, H, W) is a gap; a leading batch axis of size 1 on one side only is not (the outputs are then
        compared with it squeezed, and the pair says so in an info), so it is only named next to a real difference.
        Grayscale against colour is said as what it is: one stage converts to grayscale."""
        ri, ci = detect_layout(ev.ref.shape), detect_layout(ev.cand.shape)
        rc, cc = pair.chw[0]
        if rc is None or cc is None:
            same = ev.ref.shape[ri.batch_dims:] == ev.cand.shape[ci.batch_dims:]
        else:
            same = rc.shape == cc.shape
        if same:
            return None
        if colour_apart(ri, ci):
            return _grayscale_against_colour(pair, ev, ri, ci)
        reasons = _batch_reasons(pair, ri, ci)
        if rc is not None and cc is not None:
            reasons.append(f"{pair.cand} outputs {cc.shape[0]} channel(s) of {cc.shape[1]}x{cc.shape[2]}, "
                           f"{pair.ref} {rc.shape[0]} of {rc.shape[1]}x{rc.shape[2]}")
        reasons = reasons or [f"{pair.cand} and {pair.ref} output arrays of other shapes"]
        return pair.finding(self.code, f"{'; '.join(reasons)}: shapes {list(ev.cand.shape)} vs {list(ev.ref.shape)}",
                            **_shapes(ev, ri, ci))


def _batch_reasons(pair: "Pair", ri: LayoutInfo, ci: LayoutInfo) -> list[str]:
    if ri.batch_dims == ci.batch_dims:
        return []
    return [f"{pair.cand} has {ci.batch_dims} leading batch dimension(s), {pair.ref} has {ri.batch_dims}"]


def _shapes(ev: "Evidence", ri: LayoutInfo, ci: LayoutInfo) -> dict[str, Any]:
    return {"sample": ev.sample, "ref_shape": list(ev.ref.shape), "cand_shape": list(ev.cand.shape),
            "ref_batch_dims": ri.batch_dims, "cand_batch_dims": ci.batch_dims}


def _grayscale_against_colour(pair: "Pair", ev: "Evidence", ri: LayoutInfo, ci: LayoutInfo) -> Finding:
    """One stage outputs one channel (any layout), the other 3 or 4: the grayscale conversion is the cause, said with
    whether the grayscale values are a standard luminance of the colour ones (then it is the only difference)."""
    luminance = pair.gray_luminance
    assert luminance is not None  # a grayscale-against-colour pair
    gray_is_cand = luminance.gray_is_cand
    gray, colour = (pair.cand, pair.ref) if gray_is_cand else (pair.ref, pair.cand)
    colours = channel_count(ri if gray_is_cand else ci) or 3
    repeated = luminance.match is not None and luminance.match.luma is REPEATED
    if repeated:
        said = [f"{gray} gives 1 channel (grayscale), {colour} {colours} (one grayscale plane repeated): both are "
                f"grayscale, {colour} repeats its plane into {colours} channels"]
    else:
        kind = "RGBA" if colours == 4 else _colour_order(pair, ev, luminance.match, gray_is_cand)
        said = [f"{gray} gives 1 channel (grayscale), {colour} {colours} ({kind}): {gray} converts the picture to "
                f"grayscale and {colour} keeps its colour"]
    said += _batch_reasons(pair, ri, ci)
    rs, cs = pair.chw[0]
    if rs is not None and cs is not None:
        said.append(f"{pair.cand} outputs {cs.shape[0]} channel(s) of {cs.shape[1]}x{cs.shape[2]}, "
                    f"{pair.ref} {rs.shape[0]} of {rs.shape[1]}x{rs.shape[2]}")
    said.append(_luminance_said(gray, colour, luminance))
    message = "; ".join(s for s in said if s) + f": shapes {list(ev.cand.shape)} vs {list(ev.ref.shape)}"
    return pair.finding(SHAPE, message, **_shapes(ev, ri, ci), grayscale_stage=gray, colour_stage=colour,
                        colour_channels=colours, **_luminance_evidence(luminance))


def _colour_order(pair: "Pair", ev: "Evidence", match: LumaMatch | None, gray_is_cand: bool) -> str:
    """The colour stage's channel order: the one its channels were weighted in, else its replayed order, else
    'colour' (not guessed)."""
    if match is not None:
        return match.order
    if not pair.finite:
        return "colour"
    profile = pair.profiles(ev)[0 if gray_is_cand else 1]
    return describe_perm(profile.fit.perm) if profile is not None and len(profile.fit.perm) == 3 else "colour"


def _luminance_said(gray: str, colour: str, luminance: "GrayLuminance") -> str:
    match = luminance.match
    if match is None:
        if not luminance.compared:
            return ""
        names = ", ".join(luma.name.split(" (")[0] for luma in LUMAS)
        return (f"{gray}'s values are not a standard luminance of {colour}'s ({names}, in RGB or BGR order, up to a "
                "value map), so more than the conversion differs")
    if match.luma is REPEATED:
        mapped = "" if match.same_values else f" up to a value map ({gray} ≈ {match.slope:.4g}·plane + {match.offset:.4g})"
        return f"{gray}'s values are that plane{mapped}; max |Δ| {match.max_abs_rel:.2g} of the range"
    how = match.luma.name + (f", of {colour}'s channels read as BGR" if match.order == "BGR" else "")
    mapped = "" if match.same_values else f" up to a value map ({gray} ≈ {match.slope:.4g}·luma + {match.offset:.4g})"
    return (f"{gray}'s values are the luminance of {colour}'s{mapped}: {how}; max |Δ| {match.max_abs_rel:.2g} of the "
            f"range on {luminance.compared} sample(s)")


def _luminance_evidence(luminance: "GrayLuminance") -> dict[str, Any]:
    match = luminance.match
    if match is None:
        return {"luminance": None, "luminance_samples": luminance.compared}
    return {"luminance": match.luma.name, "luminance_order": match.order, "luminance_slope": match.slope,
            "luminance_offset": match.offset, "luminance_max_abs_rel": match.max_abs_rel,
            "luminance_samples": luminance.compared}
