"""The ways a pipeline may read the same raw image file, as arrays to replay a stage against.

Most pipelines decode a file to RGB, but not all of them read the same RGB: ``cv2.imread`` applies
the EXIF orientation tag and PIL's ``Image.open`` does not; an RGBA file is composited on white by
one pipeline and has its alpha dropped (``.convert("RGB")``) by another; ``np.asarray(Image.open(p))``
of a palette PNG gives colour *indices*; a grayscale conversion may weigh the channels as RGB or,
with ``cv2.COLOR_BGR2GRAY`` applied to an RGB array, as BGR. Each is a :class:`Source`: a name and
the array that reading gives (HWC uint8, or HW for a single channel). The replay diagnoses fit each
stage against each source that applies to the file and name the one that reproduces it.

Only image files have sources; anything else (text, audio) gets none and the diagnoses that read
them do not apply.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from gapcheck.preprocess.luminance import BT601, pil_gray

DEFAULT = "rgb"  # PIL, .convert("RGB"): EXIF not applied, alpha dropped, palette looked up
EXIF = "exif_oriented"
ALPHA_WHITE = "alpha_on_white"
ALPHA_BLACK = "alpha_on_black"
PALETTE = "palette_indices"
GRAY_RGB = "gray_rgb_weights"  # PIL's convert("L") of the RGB decode
GRAY_CV2 = "gray_cv2_weights"  # cv2.cvtColor(..., COLOR_RGB2GRAY / BGR2GRAY) of the RGB decode
GRAY_LUMA = "gray_jpeg_luma"  # a JPEG's luma plane, never converted to RGB: cv2.IMREAD_GRAYSCALE, PIL draft("L")
GRAY_BGR = "gray_bgr_weights"

ORIENTATION_TAG = 0x0112
# EXIF orientation values: what a viewer does to the stored pixels to show the picture upright.
ORIENTATIONS = {
    2: "mirror left-right",
    3: "rotate 180°",
    4: "mirror top-bottom",
    5: "transpose (mirror along the main diagonal)",
    6: "rotate 90° clockwise",
    7: "transverse (mirror along the anti-diagonal)",
    8: "rotate 90° counter-clockwise",
}
_LUMA = np.array(BT601)  # ITU-R BT.601 (gapcheck.preprocess.luminance)


@dataclass(frozen=True)
class FileFacts:
    """What the header of an image file says that changes how pipelines read it."""

    mode: str  # PIL mode: "RGB", "RGBA", "P", "L", ...
    orientation: int  # EXIF orientation tag, 1 (or 0: none) when the pixels are stored upright
    has_alpha: bool

    @property
    def oriented(self) -> bool:
        return self.orientation in ORIENTATIONS


def orientation_of(image: object) -> int:
    """The EXIF orientation tag of an open PIL image (0 when it has none or it cannot be read), from the header only.

    ``Image.getexif()`` is not used: on a PNG it decodes the whole image to look for an eXIf chunk after the pixels
    (22 ms a photo, in the header screen of every sample). The EXIF block PIL read while opening (JPEG APP1, a PNG
    eXIf before the pixels, WebP) or a TIFF's own tags are enough.
    """
    from PIL import Image

    try:
        tags = getattr(image, "tag_v2", None)  # TIFF: the orientation is one of the file's own tags
        if tags is not None:
            value = tags.get(ORIENTATION_TAG, 0)
        else:
            block = getattr(image, "info", {}).get("exif")
            if not block:
                return 0
            exif = Image.Exif()
            exif.load(block)
            value = exif.get(ORIENTATION_TAG, 0)
        return int(value) if isinstance(value, int) else 0
    except Exception:  # noqa: BLE001 - a hostile or broken EXIF block means "no tag", never a crash
        return 0


def file_facts(data: bytes) -> FileFacts | None:
    """The file's mode, orientation tag and alpha; None when it is not an image PIL can open."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            alpha = image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info
            return FileFacts(image.mode, orientation_of(image), alpha)
    except Exception:  # noqa: BLE001 - not an image: no sources
        return None


def _luma(rgb: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return np.clip(np.round(rgb.astype(np.float64) @ weights), 0, 255).astype(np.uint8)


def _composite(rgba: np.ndarray, background: float) -> np.ndarray:
    alpha = rgba[..., 3:4].astype(np.float64) / 255.0
    mixed = rgba[..., :3].astype(np.float64) * alpha + background * (1.0 - alpha)
    return np.clip(np.round(mixed), 0, 255).astype(np.uint8)


def sources(data: bytes, channels: int, max_pixels: int) -> dict[str, np.ndarray]:
    """Every reading of the file that applies to it, for a stage output with ``channels`` channels.

    The default reading comes first (``rgb``, or ``gray_rgb_weights`` for one channel); only
    alternatives that differ from it are listed (no EXIF tag: no ``exif_oriented``).
    """
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(data)) as image:
        if image.size[0] * image.size[1] > max_pixels:
            return {}
        image.load()
        rgb = np.asarray(image.convert("RGB"))
        readings: dict[str, np.ndarray] = {DEFAULT: rgb}
        if orientation_of(image) in ORIENTATIONS:
            readings[EXIF] = np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
        if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
            rgba = np.asarray(image.convert("RGBA"))
            if (rgba[..., 3] < 255).any():
                readings[ALPHA_WHITE] = _composite(rgba, 255.0)
                readings[ALPHA_BLACK] = _composite(rgba, 0.0)
        if image.mode == "P":
            indices = np.asarray(image)
            readings[PALETTE] = np.repeat(indices[..., None], 3, axis=-1)
    return _gray_readings(data, readings) if channels == 1 else readings


def _gray_readings(data: bytes, readings: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The one-channel readings: PIL's and OpenCV's luma of the RGB decode (they round differently, by one level at
    most), a JPEG's own luma plane (no RGB decode, so no clipping of saturated colours: several levels apart
    there), luma with the red and blue weights swapped, and the other readings converted PIL's way."""
    import cv2

    rgb = readings[DEFAULT]
    gray = {GRAY_RGB: pil_gray(rgb), GRAY_CV2: cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)}
    luma = jpeg_luma(data)
    if luma is not None and luma.shape == rgb.shape[:2]:
        gray[GRAY_LUMA] = luma
    gray[GRAY_BGR] = _luma(rgb, _LUMA[::-1])
    gray.update({name: pil_gray(a) for name, a in readings.items() if name not in (DEFAULT, PALETTE)})
    if PALETTE in readings:
        gray[PALETTE] = readings[PALETTE][..., 0]
    return gray


def jpeg_luma(data: bytes) -> np.ndarray | None:
    """A colour JPEG's luma (Y) plane as the decoder gives it without converting to RGB (what
    ``cv2.imread(p, cv2.IMREAD_GRAYSCALE)`` returns); None for anything else."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        if image.format != "JPEG" or image.mode not in ("RGB", "YCbCr"):
            return None
        image.draft("L", image.size)  # full scale: only the colour space changes
        if image.mode != "L":
            return None
        return np.asarray(image)
