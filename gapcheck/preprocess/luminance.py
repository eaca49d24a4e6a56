"""Is a grayscale output the luminance of a colour one? The weighted sums libraries use to make grayscale, tried on
the colour stage's channels in both orders (RGB, and BGR for a stage that never converted OpenCV's decode), with a
value map between them (one stage may divide by 255, the other not).

Used by the ``shape`` finding of a grayscale-against-colour pair: when the check holds, the user knows the only
difference is the conversion itself, not a decode, resize or value difference hidden behind it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# ITU-R BT.601 luma weights for (R, G, B), as PIL's convert("L") and cv2's RGB2GRAY use them (each rounds them its
# own way: PIL to 16-bit integers, 19595/38470/7471 >> 16; OpenCV to 14-bit, 4899/9617/1868 >> 14).
BT601 = (0.299, 0.587, 0.114)


def pil_gray(rgb: np.ndarray) -> np.ndarray:
    """PIL's convert('L') of an 8-bit HxWx3 RGB array (its own fixed-point rounding, bit for bit)."""
    from PIL import Image

    return np.asarray(Image.fromarray(np.ascontiguousarray(rgb)).convert("L"))


@dataclass(frozen=True)
class Luma:
    """A grayscale conversion: its name as a user knows it and its weights for (R, G, B)."""

    name: str
    weights: tuple[float, float, float]


LUMAS = (
    Luma("ITU-R 601 luma (0.299 R + 0.587 G + 0.114 B, as PIL convert('L') and OpenCV cvtColor make it)", BT601),
    Luma("ITU-R 709 luma (0.2125 R + 0.7154 G + 0.0721 B, as scikit-image rgb2gray makes it)",
         (0.2125, 0.7154, 0.0721)),
    Luma("the mean of the channels", (1 / 3, 1 / 3, 1 / 3)),
)

# A colour output whose channels are all equal is a grayscale picture repeated (np.repeat, PIL .convert('L')
# .convert('RGB'), torchvision Grayscale(3)): every weighting gives the same plane, so none is named.
REPEATED = Luma("one plane repeated in every channel", (1 / 3, 1 / 3, 1 / 3))

# Allowed max |Δ| between the grayscale output and the fitted luminance, relative to the grayscale's value range:
# PIL and OpenCV round the luma to 8 bits before resizing while the colour stage resizes the colour channels and rounds
# those, so the two differ by a level or two (at most 1.9 levels on the scikit-image photos); another weighting differs
# by more (601 against 709: 3.5 levels on rocket.jpg, 6 to 10 on the other photos) and the best fit is the one named.
LUMA_TOLERANCE = 3 / 255


@dataclass(frozen=True)
class LumaMatch:
    """The grayscale output is ``slope · luma(colour) + offset`` within ``max_abs_rel`` of its value range."""

    luma: Luma
    order: str  # the colour stage's channel order the weights were applied in: "RGB" or "BGR"
    slope: float
    offset: float
    max_abs_rel: float

    @property
    def same_values(self) -> bool:
        """No value map in between: the grayscale output is the luminance itself (within the tolerance)."""
        return abs(self.slope - 1.0) <= LUMA_TOLERANCE and abs(self.offset) <= LUMA_TOLERANCE


def luminance_match(gray: np.ndarray, colour: np.ndarray, tolerance: float = LUMA_TOLERANCE) -> LumaMatch | None:
    """The best standard luminance of ``colour`` (C, H, W; C 3 or 4, the 4th is alpha and not weighted) that
    reproduces ``gray`` (H, W) up to an affine value map, or None when none does (or the sizes differ)."""
    if colour.ndim != 3 or colour.shape[0] not in (3, 4) or gray.shape != colour.shape[1:] or not gray.size:
        return None
    target = gray.astype(np.float64).ravel()
    spread = float(np.ptp(target)) or 1.0
    if float(np.max(np.ptp(colour[:3], axis=0))) <= tolerance * (float(np.ptp(colour[:3])) or 1.0):
        match = _fit(REPEATED, "RGB", colour[:3].astype(np.float64).mean(axis=0).ravel(), target, spread)
        return match if match is not None and match.max_abs_rel <= tolerance else None
    best: LumaMatch | None = None
    for order, planes in (("RGB", colour[:3]), ("BGR", colour[2::-1])):
        flat = planes.astype(np.float64).reshape(3, -1)
        for luma in LUMAS:
            match = _fit(luma, order, np.asarray(luma.weights) @ flat, target, spread)
            if match is not None and (best is None or match.max_abs_rel < best.max_abs_rel):
                best = match
    return best if best is not None and best.max_abs_rel <= tolerance else None


def _fit(luma: Luma, order: str, lum: np.ndarray, target: np.ndarray, spread: float) -> LumaMatch | None:
    """Least-squares ``target ≈ slope · lum + offset``; None when ``lum`` is flat (nothing to tell weights apart)."""
    centred = lum - lum.mean()
    power = float(centred @ centred)
    if power == 0.0:
        return None
    slope = float(centred @ (target - target.mean())) / power
    offset = float(target.mean() - slope * lum.mean())
    residual = float(np.max(np.abs(slope * lum + offset - target))) / spread
    return LumaMatch(luma, order, slope, offset, residual)
