"""Resize and crop: replay candidate geometries and resize methods on the raw image.

A stage's output is explained by re-running, on the decoded raw image, every
candidate geometry (direct resize, shorter-side resize + center crop at common crop
ratios, plain center crop) and then every resize backend × interpolation × antialias,
each followed by the best channel permutation and per-channel affine map. The
candidate that reproduces the stage with the highest PSNR names the stage's method.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace

import numpy as np

from gapcheck.preprocess.affine import AffineFit, AffineTarget
from gapcheck.preprocess.imageops import ResizeMethod, candidate_resize_methods, center_crop, resize, shorter_side_size

logger = logging.getLogger(__name__)

# Most common first: the first candidate that replays a stage exactly ends the search (the stage table's replay of
# the reference runs on every audit), and 224/0.875 = 256 is the classic ImageNet evaluation.
CROP_RATIOS = (0.875, 0.95, 0.9, 1.0, 0.96, 0.8, 0.75, 0.94, 0.91)  # 0.94: many timm models; 0.91: timm's NFNet-F1
# Resize sizes before a center crop that no crop ratio gives, per crop size: the classic ImageNet 256 for 224 (also
# 224/0.875) and the resize sizes of torchvision's weights presets (ResNet-50 V2, RegNet, Swin: 232; ConvNeXt: 236).
PRESET_SHORTER_SIDES = {224: (256, 232, 236)}
REFERENCE_METHOD = ResizeMethod("pil", "bilinear")
MIN_PROFILE_PSNR_DB = 38.0  # below this the replay does not reproduce the stage: no profile
EQUIVALENT_WITHIN_DB = 1.0  # methods this close to the best are indistinguishable on this sample
EXACT_PSNR_DB = 120.0  # a replay this close reproduces the stage up to float rounding (reports cap here)


@dataclass(frozen=True)
class Geometry:
    kind: str  # "none" | "resize" | "resize_crop" | "squash_crop" | "crop"
    out_height: int
    out_width: int
    shorter_side: int = 0  # resize_crop: the shorter side's size; squash_crop: both sides' (timm crop_mode='squash')
    rounding: str = "int"  # resize_crop only: how the longer side is rounded ("int" truncates, as torchvision)

    @property
    def label(self) -> str:
        if self.kind == "resize_crop":
            rounded = " (longer side rounded with round())" if self.rounding == "round" else ""
            return f"resize shorter side to {self.shorter_side}{rounded}, center crop {self.out_height}x{self.out_width}"
        if self.kind == "squash_crop":
            return (f"resize to {self.shorter_side}x{self.shorter_side} (aspect ratio not kept: timm's crop_mode='squash'), "
                    f"center crop {self.out_height}x{self.out_width}")
        if self.kind == "resize":
            return f"resize to {self.out_height}x{self.out_width}"
        if self.kind == "crop":
            return f"center crop {self.out_height}x{self.out_width} (no resize)"
        return "no resize or crop"

    @property
    def resizes(self) -> bool:
        return self.kind in ("resize", "resize_crop", "squash_crop")


@dataclass(frozen=True)
class StageProfile:
    """What replay says a stage does to the raw image."""

    geometry: Geometry
    method: ResizeMethod | None
    equivalent_methods: tuple[str, ...]
    fit: AffineFit
    psnr_db: float
    # the raw image replayed, when it is not the sample's default decode (the EXIF-oriented picture)
    source: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def method_label(self) -> str:
        return self.method.label if self.method is not None and self.geometry.resizes else "none"


def render(raw_rgb: np.ndarray, geometry: Geometry, method: ResizeMethod, keep_float: bool = False) -> np.ndarray:
    """Apply a geometry to the raw HWC (or HW) image; returns (C, H, W) float64."""
    h, w = raw_rgb.shape[:2]
    if geometry.kind == "resize":
        image = resize(raw_rgb, geometry.out_height, geometry.out_width, method, keep_float)
    elif geometry.kind == "resize_crop":
        rh, rw = shorter_side_size(h, w, geometry.shorter_side, geometry.rounding)
        image = center_crop(resize(raw_rgb, rh, rw, method, keep_float), geometry.out_height, geometry.out_width)
    elif geometry.kind == "squash_crop":
        side = geometry.shorter_side
        image = center_crop(resize(raw_rgb, side, side, method, keep_float), geometry.out_height, geometry.out_width)
    elif geometry.kind == "crop":
        image = center_crop(raw_rgb, geometry.out_height, geometry.out_width)
    else:
        image = raw_rgb
    # C-order CHW float64 in one pass (the fit reads it by channel; a moved-axis view would be gathered again).
    return np.asarray(image, dtype=np.float64)[None] if image.ndim == 2 else \
        np.ascontiguousarray(np.moveaxis(image, -1, 0), dtype=np.float64)


def shorter_sides(crop: int) -> list[int]:
    """The shorter sides a pipeline resizes to before center-cropping ``crop``, the most common first.

    A crop ratio gives two: ``math.floor(crop / ratio)`` as timm's ``transforms_factory`` and torchvision's reference
    scripts compute it (224/0.95 -> 235, 224/0.9 -> 248) and ``round()`` as hand-written pipelines do (236, 249); then
    the preset sizes no ratio gives (:data:`PRESET_SHORTER_SIDES`)."""
    sizes: list[int] = []
    for ratio in CROP_RATIOS:
        for size in (math.floor(crop / ratio), int(round(crop / ratio))):
            if size not in sizes:
                sizes.append(size)
    return sizes + [s for s in PRESET_SHORTER_SIDES.get(crop, ()) if s not in sizes]


def candidate_geometries(raw_hw: tuple[int, int], out_hw: tuple[int, int]) -> list[Geometry]:
    (h, w), (oh, ow) = raw_hw, out_hw
    geometries = []
    if (h, w) == (oh, ow):
        geometries.append(Geometry("none", oh, ow))
    geometries.append(Geometry("resize", oh, ow))
    for shorter in shorter_sides(min(oh, ow)):
        for rounding in ("int", "round"):
            rh, rw = shorter_side_size(h, w, shorter, rounding)
            if rounding == "round" and (rh, rw) == shorter_side_size(h, w, shorter):
                continue  # the same size either way: one candidate
            if rh >= oh and rw >= ow and (rh, rw) != (oh, ow):
                geometries.append(Geometry("resize_crop", oh, ow, shorter, rounding))
    if oh == ow and h != w:
        # timm's crop_mode='squash' (NFNets): both sides to floor(crop / crop_pct), then a center crop; timm only, so
        # floored sizes only. On a square picture it is the shorter-side resize above (nothing to try).
        floored = dict.fromkeys(math.floor(oh / ratio) for ratio in CROP_RATIOS)
        geometries += [Geometry("squash_crop", oh, ow, side) for side in floored if side > oh]
    if h >= oh and w >= ow and (h, w) != (oh, ow):
        geometries.append(Geometry("crop", oh, ow))
    return geometries


class _Target(AffineTarget):
    """A stage output to replay, with what every candidate's fit and PSNR need computed once."""

    def __init__(self, stage_chw: np.ndarray) -> None:
        super().__init__(stage_chw)
        self.peak = float(stage_chw.max() - stage_chw.min()) or 1.0 if stage_chw.size else 1.0

    def psnr(self, fit: AffineFit) -> float:
        """Replay PSNR, capped at :data:`EXACT_PSNR_DB`: above it the residual is float rounding, whose last bits
        depend on the machine and the order of sums, not on the stage (a report must not)."""
        return EXACT_PSNR_DB if fit.rmse == 0 else min(EXACT_PSNR_DB, 20.0 * math.log10(self.peak / fit.rmse))


def score(raw_rgb: np.ndarray, stage_chw: np.ndarray | _Target, geometry: Geometry,
          method: ResizeMethod) -> tuple[float, AffineFit | None]:
    """How well ``method`` reproduces the stage; torch is replayed both rounded to uint8 and in float, best kept
    (a pipeline may resize uint8 tensors or floats, and only the rounding tells torch from cv2 on some images)."""
    target = stage_chw if isinstance(stage_chw, _Target) else _Target(stage_chw)
    best: tuple[float, AffineFit | None] = (-math.inf, None)
    for keep_float in ((False, True) if method.backend == "torch" and geometry.resizes else (False,)):
        try:
            rendered = render(raw_rgb, geometry, method, keep_float)
        except ValueError:
            continue
        fit = target.fit(rendered)
        if fit is not None and target.psnr(fit) > best[0]:
            best = (target.psnr(fit), fit)
    return best


def fit_profile(raw_rgb: np.ndarray, stage_chw: np.ndarray) -> StageProfile | None:
    """Replay geometries then methods; None when nothing reproduces the stage (PSNR below the bar).

    ``raw_rgb`` is HWC with as many channels as the stage output, or HW for a one-channel output.
    """
    channels = raw_rgb.shape[2] if raw_rgb.ndim == 3 else 1 if raw_rgb.ndim == 2 else 0
    if stage_chw.ndim != 3 or stage_chw.shape[0] != channels or channels not in (1, 3):
        return None
    if not np.isfinite(stage_chw).all():
        return None  # nothing replays to NaN or inf (that is the nonfinite_output finding)
    out_hw = (stage_chw.shape[1], stage_chw.shape[2])
    target = _Target(stage_chw)
    (best_psnr, best_fit), geometry = _best_geometry(raw_rgb, target, out_hw)
    if best_fit is None or geometry is None:
        return None
    method: ResizeMethod | None = None
    equivalent: tuple[str, ...] = ()
    if geometry.resizes:
        results = [(score(raw_rgb, target, geometry, m), m) for m in candidate_resize_methods()]
        (best_psnr, best_fit), method = max(results, key=lambda item: item[0][0])
        equivalent = tuple(
            m.label for (p, _), m in results if p >= best_psnr - EQUIVALENT_WITHIN_DB or p == math.inf
        )
        geometry, best_psnr, best_fit = _rounding_sibling(raw_rgb, target, geometry, method, best_psnr, best_fit)
    if best_fit is None or best_psnr < MIN_PROFILE_PSNR_DB:
        logger.debug("no profile: best replay %s at %.1f dB", geometry.label, best_psnr)
        return None
    return StageProfile(geometry, method, equivalent, best_fit, best_psnr)


def _best_geometry(raw_rgb: np.ndarray, target: _Target, out_hw: tuple[int, int]
                   ) -> tuple[tuple[float, AffineFit | None], Geometry | None]:
    """The first best-scoring candidate geometry (with the reference method). Scores are capped at
    :data:`EXACT_PSNR_DB`, so the first candidate that reaches the cap is the pick: the rest are not rendered."""
    best: tuple[tuple[float, AffineFit | None], Geometry | None] = ((-math.inf, None), None)
    for geometry in candidate_geometries(raw_rgb.shape[:2], out_hw):
        scored = score(raw_rgb, target, geometry, REFERENCE_METHOD)
        if best[1] is None or scored[0] > best[0][0]:
            best = (scored, geometry)
        if scored[0] >= EXACT_PSNR_DB:
            break
    return best


def _rounding_sibling(raw: np.ndarray, stage_chw: _Target, geometry: Geometry, method: ResizeMethod,
                      psnr: float, fit: AffineFit | None) -> tuple[Geometry, float, AffineFit | None]:
    """The geometry was chosen with the reference method; int() vs round() of the longer side (one pixel) can
    hide under another method's differences there, so the sibling rounding is scored again with the stage's own."""
    if geometry.kind != "resize_crop":
        return geometry, psnr, fit
    sibling = replace(geometry, rounding="round" if geometry.rounding == "int" else "int")
    h, w = raw.shape[:2]
    if shorter_side_size(h, w, sibling.shorter_side, sibling.rounding) == shorter_side_size(
            h, w, geometry.shorter_side, geometry.rounding):
        return geometry, psnr, fit
    other_psnr, other_fit = score(raw, stage_chw, sibling, method)
    return (sibling, other_psnr, other_fit) if other_psnr > psnr + EQUIVALENT_WITHIN_DB else (geometry, psnr, fit)


def replay_psnr(raw_rgb: np.ndarray, stage_chw: np.ndarray, geometry: Geometry, method: ResizeMethod | None) -> float:
    """How well a given geometry/method reproduces a stage output (for evidence)."""
    return score(raw_rgb, stage_chw, geometry, method or REFERENCE_METHOD)[0]
