"""Finding raw samples and screening them as hostile input before any stage sees them.

Screening is deliberately cheap (header only): the full decode is left to the stages,
and only when a stage fails do we decode fully to tell a corrupt file from a stage bug.
Samples that cannot be decoded safely (unreadable, not an image, corrupt, decompression
bomb) are counted and listed, never passed on; unusual but decodable images
(grayscale, alpha, 16-bit) are listed as warnings and still audited.
"""
from __future__ import annotations

import io
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from gapcheck.errors import InputError

logger = logging.getLogger(__name__)

# PIL's own default; also applied to PIL inside workers so stages that decode with PIL are guarded too.
DEFAULT_MAX_PIXELS = 89_478_485

# Codes for samples that are never passed to a stage.
SKIPPED_INPUT_CODES = ("unreadable", "not_image", "corrupt_image", "decompression_bomb")
# Codes for samples that are audited but unusual enough to list.
UNUSUAL_INPUT_CODES = ("grayscale_input", "alpha_input", "high_bit_depth_input")


@dataclass(frozen=True)
class InputIssue:
    code: str  # one of SKIPPED_INPUT_CODES or UNUSUAL_INPUT_CODES
    detail: str

    @property
    def skipped(self) -> bool:
        return self.code in SKIPPED_INPUT_CODES


@dataclass(frozen=True)
class Screening:
    """What the header says about one raw sample."""

    issue: InputIssue | None
    image_format: str = ""
    mode: str = ""
    width: int = 0
    height: int = 0


def discover_samples(samples: str | Path | Iterable[str | Path], n: int) -> list[Path]:
    """The first ``n`` files (sorted, recursive) of a directory, or the given files in order.

    Hidden files are ignored; nothing is filtered by extension, because a non-image
    file in a sample folder is exactly the kind of thing the audit must list.
    """
    if n < 1:
        raise InputError(f"--n must be at least 1 (got {n})")
    if isinstance(samples, (str, Path)):
        root = Path(samples)
        if root.is_dir():
            files = sorted(
                p for p in root.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
            )
        elif root.is_file():
            files = [root]
        else:
            raise InputError(f"samples path does not exist: {root}")
    else:
        files = [Path(p) for p in samples]
        missing = [str(p) for p in files if not p.exists()]
        if missing:
            raise InputError(f"{len(missing)} sample path(s) do not exist: {', '.join(missing[:5])}")
    if not files:
        raise InputError(f"no sample files found in {samples}")
    return files[:n]


def _png_bit_depth(data: bytes) -> int | None:
    # IHDR is always the first chunk: 8-byte signature, 4 length, 4 type, 4 width, 4 height, 1 bit depth.
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 24 and data[12:16] == b"IHDR":
        return data[24]
    return None


def screen_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> Screening:
    """Classify a raw sample from its header (no full decode)."""
    from PIL import Image, UnidentifiedImageError

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                fmt, mode = image.format or "", image.mode
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            return Screening(InputIssue("decompression_bomb", str(exc)))
        except UnidentifiedImageError:
            return Screening(InputIssue("not_image", "not a recognised image format"))
        except Exception as exc:  # noqa: BLE001 - a hostile header can make a decoder raise anything
            return Screening(InputIssue("corrupt_image", f"{type(exc).__name__}: {exc}"))
    if width * height > max_pixels or width <= 0 or height <= 0:
        detail = f"{width}x{height} = {width * height} pixels exceeds the limit of {max_pixels}"
        return Screening(InputIssue("decompression_bomb", detail), fmt, mode, width, height)
    issue = None
    bit_depth = _png_bit_depth(data)
    if mode in ("I;16", "I;16B", "I;16L", "I", "F") or (bit_depth is not None and bit_depth > 8):
        issue = InputIssue("high_bit_depth_input", f"{fmt} mode {mode}" + (f", {bit_depth}-bit" if bit_depth else ""))
    elif mode in ("L", "1", "LA", "La"):
        issue = InputIssue("grayscale_input", f"{fmt} mode {mode}")
    elif mode in ("RGBA", "RGBa", "PA") or (mode == "P" and "transparency" in getattr(image, "info", {})):
        issue = InputIssue("alpha_input", f"{fmt} mode {mode}")
    return Screening(issue, fmt, mode, width, height)


def full_decode_issue(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> InputIssue | None:
    """Decode fully to tell a corrupt/truncated file from a stage bug; None when the file decodes."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                if image.size[0] * image.size[1] > max_pixels:
                    return InputIssue("decompression_bomb", f"{image.size[0]}x{image.size[1]} pixels")
                image.load()
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            return InputIssue("decompression_bomb", str(exc))
        except Exception as exc:  # noqa: BLE001 - any decoder failure means the file is corrupt
            return InputIssue("corrupt_image", f"{type(exc).__name__}: {exc}")
    return None


def decode_rgb(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """The reference decode used to replay hypotheses: PIL, converted to 8-bit RGB, HWC uint8."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        if image.size[0] * image.size[1] > max_pixels:
            raise InputError(f"image of {image.size[0]}x{image.size[1]} pixels exceeds the limit of {max_pixels}")
        return np.asarray(image.convert("RGB"))


def guard_decoders(max_pixels: int) -> None:
    """Apply the pixel limit to PIL and OpenCV in this (worker) process, for stages that decode themselves."""
    import os

    from PIL import Image

    Image.MAX_IMAGE_PIXELS = max_pixels
    # OpenCV reads this when it first decodes; the header screen above already rejects larger images.
    os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(max_pixels))
