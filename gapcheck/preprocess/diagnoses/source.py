"""Source: the stages read the raw file differently — EXIF orientation, transparency, palette, grayscale weights.

Each stage is replayed (geometry, resize method, channel order, value map) against every reading of
the raw file that applies to it (:mod:`gapcheck.preprocess.sources`): the stored pixels, the
EXIF-oriented picture, transparency composited on white or black, the palette indices, grayscale
with PIL's or OpenCV's luma, a JPEG's own luma plane, or with BGR weights. A stage's reading is the
first one (the default first) that reproduces it within 1 dB of its best; when the two stages'
readings differ, that is the cause, named with the stage that reads the file the other way.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from gapcheck.codes.preprocess import ALPHA_COMPOSITE, CHANNEL_ORDER, GRAYSCALE_CONVERSION, ORIENTATION, PALETTE_INDICES
from gapcheck.findings import Finding, Severity
from gapcheck.preprocess import sources as src
from gapcheck.preprocess.diagnoses.base import first_found
from gapcheck.preprocess.layout import to_chw
from gapcheck.preprocess.replay import EQUIVALENT_WITHIN_DB, MIN_PROFILE_PSNR_DB, REFERENCE_METHOD, fit_profile, render
from gapcheck.preprocess.samples import DEFAULT_MAX_PIXELS

if TYPE_CHECKING:
    from gapcheck.preprocess.diagnoses.base import Evidence, Pair
    from gapcheck.preprocess.replay import StageProfile

_WHAT = {
    src.DEFAULT: "reads the stored pixels as RGB (PIL .convert('RGB'): no EXIF orientation, alpha dropped)",
    src.EXIF: "applies the file's EXIF orientation tag",
    src.ALPHA_WHITE: "composites transparent pixels on white",
    src.ALPHA_BLACK: "composites transparent pixels on black",
    src.PALETTE: "reads the palette image's colour indices, not its colours (mode P without .convert('RGB'))",
    src.GRAY_RGB: "decodes to RGB and converts to grayscale with PIL's ITU-R 601-2 luma (convert('L'): 16-bit integer "
                  "weights)",
    src.GRAY_CV2: ("decodes to RGB and converts to grayscale with OpenCV's luma (cv2.cvtColor ..._2GRAY: 14-bit "
                   "fixed-point weights, rounding differently from PIL's convert('L') by one level on some pixels)"),
    src.GRAY_LUMA: ("reads the JPEG's luma (Y) plane without decoding to RGB (cv2.imread(p, cv2.IMREAD_GRAYSCALE), "
                    "PIL draft('L')): where colours are saturated, a decode to RGB clips and the luma computed from "
                    "it differs by several levels"),
    src.GRAY_BGR: ("converts to grayscale with the red and blue weights swapped (cv2.COLOR_BGR2GRAY applied to an "
                   "RGB array: a channel-order mistake before the colour conversion)"),
}
# How the stage that reads the file the default way is described, per cause.
_DEFAULT_WHAT = {
    ALPHA_COMPOSITE: {**_WHAT, src.DEFAULT: "drops the alpha channel (.convert('RGB') keeps the colour under transparent "
                                            "pixels)"},
    PALETTE_INDICES: {**_WHAT, src.DEFAULT: "looks the indices up in the palette (.convert('RGB'))"},
}
_CODES = {src.EXIF: ORIENTATION, src.ALPHA_WHITE: ALPHA_COMPOSITE, src.ALPHA_BLACK: ALPHA_COMPOSITE,
          src.PALETTE: PALETTE_INDICES, src.GRAY_BGR: CHANNEL_ORDER, src.GRAY_CV2: GRAYSCALE_CONVERSION,
          src.GRAY_LUMA: GRAYSCALE_CONVERSION}
# Two 8-bit levels: a grayscale conversion that moves the outputs no more than this is a
# warning (PIL's and OpenCV's luma round one level apart); beyond it, a gap (the JPEG luma plane: several levels).
GRAY_GAP_LEVELS = 2.0


def reading_of(readings: dict[str, np.ndarray], stage_chw: np.ndarray) -> tuple[str, float, "StageProfile | None"]:
    """The first reading (in order) that reproduces the stage within 1 dB of the best one, its PSNR and profile."""
    profiles = {name: fit_profile(array, stage_chw) for name, array in readings.items()}
    scores = {name: p.psnr_db if p is not None else -math.inf for name, p in profiles.items()}
    best = max(scores.values(), default=-math.inf)
    name = next((n for n, s in scores.items() if s >= best - EQUIVALENT_WITHIN_DB), src.DEFAULT)
    return name, scores.get(name, -math.inf), profiles.get(name)


def conversion_effect(readings: dict[str, np.ndarray], profile: "StageProfile", own: str, other: str) -> float:
    """What reading the file ``other``'s way instead of ``own`` changes in the stage's output, in 8-bit levels:
    the stage's geometry and resize method replayed on both readings (its value map is affine, so levels before
    it say the same). Not the pair's whole max |Δ|, which also holds any other difference between the stages."""
    method = profile.method or REFERENCE_METHOD
    mine, theirs = (render(readings[name], profile.geometry, method) for name in (own, other))
    return float(np.max(np.abs(mine - theirs))) if mine.size else 0.0


class SourceDiagnosis:
    """The two stages' outputs are reproduced by different readings of the same raw file."""

    code = ORIENTATION  # also emits alpha_composite, palette_indices, channel_order and grayscale_conversion
    codes = (ORIENTATION, ALPHA_COMPOSITE, PALETTE_INDICES, CHANNEL_ORDER, GRAYSCALE_CONVERSION)
    reads_values = True

    def applies(self, pair: "Pair") -> bool:
        # a grayscale that is the luminance of the colour output read the file the same way (its replay on the file's
        # own grayscale, made before resizing, is a few levels off and proves nothing)
        return bool(pair.evidence) and not pair.structure_only and not pair.gray_of_colour

    def diagnose(self, pair: "Pair") -> Finding | None:
        return first_found(pair.evidence, lambda ev: self._on(pair, ev))

    def _on(self, pair: "Pair", ev: "Evidence") -> Finding | None:
        ref, cand = to_chw(ev.ref), to_chw(ev.cand)
        if ev.data is None or ref is None or cand is None or ref.shape[0] != cand.shape[0] or ref.shape[0] not in (1, 3):
            return None
        try:
            readings = src.sources(ev.data, ref.shape[0], DEFAULT_MAX_PIXELS)
        except Exception:  # noqa: BLE001 - not an image file (or not one PIL reads): no readings to compare
            return None
        if len(readings) < 2:
            return None
        (ref_name, ref_db, ref_profile), (cand_name, cand_db, cand_profile) = \
            reading_of(readings, ref), reading_of(readings, cand)
        if ref_name == cand_name or min(ref_db, cand_db) < MIN_PROFILE_PSNR_DB:
            return None
        odd, other = (pair.cand, pair.ref) if cand_name in _CODES else (pair.ref, pair.cand)
        odd_name, other_name = (cand_name, ref_name) if odd == pair.cand else (ref_name, cand_name)
        code = _CODES.get(odd_name) or _CODES[other_name]
        message = f"{odd} {_WHAT[odd_name]}, {other} {_DEFAULT_WHAT.get(code, _WHAT)[other_name]}"
        evidence: dict[str, Any] = {"ref_reading": ref_name, "cand_reading": cand_name, "ref_replay_psnr_db": ref_db,
                                       "cand_replay_psnr_db": cand_db}
        if code is ORIENTATION:
            tag = ev.orientation
            tagged = sum(1 for s in pair.population.differing if pair.population.orientations.get(s, 0) in src.ORIENTATIONS)
            message = (f"{odd} applies the EXIF orientation tag of {ev.sample} ({tag}: {src.ORIENTATIONS.get(tag, '?')}), "
                       f"{other} reads the stored pixels: the outputs are rotated/mirrored against each other; "
                       f"{tagged} of the {len(pair.population.differing)} differing sample(s) carry an orientation tag")
            evidence.update(orientation_tag=tag, transform=src.ORIENTATIONS.get(tag, ""), applied_by=odd,
                            not_applied_by=other, tagged_differing_samples=tagged)
        elif code is CHANNEL_ORDER:
            evidence.update(conversion="grayscale", swapped_weights_in=odd)
        elif code is GRAYSCALE_CONVERSION:
            profile = cand_profile if odd == pair.cand else ref_profile
            effect = conversion_effect(readings, profile, odd_name, other_name) if profile is not None else None
            return self._gray(pair, ev, message, evidence, effect)
        return pair.finding(code, message, sample=ev.sample, **evidence)

    @staticmethod
    def _gray(pair: "Pair", ev: "Evidence", message: str, evidence: dict[str, Any], effect: float | None) -> Finding:
        """Severity per effect: the 8-bit levels the conversion alone moves the output by (else the pair's largest
        difference, in levels of the reference's range)."""
        if effect is None:
            ref = to_chw(ev.ref)
            effect = 255.0 * pair.observed_max_abs / ((float(np.ptp(ref)) if ref is not None and ref.size else 0.0)
                                                      or 1.0)
        severity = Severity.GAP if effect > GRAY_GAP_LEVELS else Severity.WARNING
        message += (f"; this alone moves the output by up to {effect:.2g} of 255 levels "
                    + ("(more than two levels: a gap)" if severity is Severity.GAP else
                       "(two levels or less: a warning)"))
        return pair.finding(GRAYSCALE_CONVERSION, message, sample=ev.sample, severity=severity,
                            effect_levels=round(effect, 3), **evidence)
