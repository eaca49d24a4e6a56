"""Image operations shared by declarative recipes and by the replay of resize/crop hypotheses.

Each backend is called the way a user's pipeline would call it (PIL and cv2 on uint8,
torch on float with optional antialias), so a replay reproduces a real pipeline bit for bit.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

PIL_FILTERS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")
CV2_INTERPOLATIONS = ("nearest", "linear", "cubic", "area", "lanczos4")
TORCH_MODES = ("nearest", "bilinear", "bicubic")


@dataclass(frozen=True)
class ResizeMethod:
    """One way to resize: backend × interpolation × antialias (PIL always antialiases on downscale)."""

    backend: str  # "pil" | "cv2" | "torch"
    interpolation: str
    antialias: bool = True

    @property
    def label(self) -> str:
        if self.backend == "pil":
            return f"PIL {self.interpolation}"
        if self.backend == "cv2":
            return f"cv2 INTER_{self.interpolation.upper()}"
        return f"torch {self.interpolation}{' antialias' if self.antialias else ''}"


def candidate_resize_methods() -> tuple[ResizeMethod, ...]:
    """Every resize backend/interpolation/antialias combination gapcheck replays."""
    methods = [ResizeMethod("pil", f) for f in PIL_FILTERS]
    methods += [ResizeMethod("cv2", i, antialias=(i == "area")) for i in CV2_INTERPOLATIONS]
    methods += [ResizeMethod("torch", m, antialias=a) for m in ("bilinear", "bicubic") for a in (True, False)]
    return tuple(methods)


def validate_method(method: ResizeMethod) -> None:
    allowed = {"pil": PIL_FILTERS, "cv2": CV2_INTERPOLATIONS, "torch": TORCH_MODES}
    if method.backend not in allowed:
        raise ValueError(f"unknown resize backend {method.backend!r} (use one of: {', '.join(allowed)})")
    if method.interpolation not in allowed[method.backend]:
        raise ValueError(
            f"unknown interpolation {method.interpolation!r} for {method.backend} "
            f"(use one of: {', '.join(allowed[method.backend])})"
        )


def resize(image: np.ndarray, height: int, width: int, method: ResizeMethod, keep_float: bool = False) -> np.ndarray:
    """Resize an HWC (or HW) image to (height, width) with ``method``; keeps uint8 for PIL and cv2.

    torch rounds a uint8 input back to uint8 (as torchvision does on uint8 tensors) unless
    ``keep_float``: a pipeline that converts to float before resizing never rounds.
    """
    if method.backend == "pil":
        from PIL import Image

        filters = {
            "nearest": Image.Resampling.NEAREST,
            "bilinear": Image.Resampling.BILINEAR,
            "bicubic": Image.Resampling.BICUBIC,
            "lanczos": Image.Resampling.LANCZOS,
            "box": Image.Resampling.BOX,
            "hamming": Image.Resampling.HAMMING,
        }
        if image.dtype != np.uint8:
            # PIL resizes float images per channel in mode "F".
            planes = [
                np.asarray(Image.fromarray(np.ascontiguousarray(image[..., c], dtype=np.float32), mode="F").resize(
                    (width, height), filters[method.interpolation]))
                for c in range(image.shape[-1])
            ] if image.ndim == 3 else [np.asarray(Image.fromarray(image.astype(np.float32), mode="F").resize(
                (width, height), filters[method.interpolation]))]
            return np.stack(planes, axis=-1) if image.ndim == 3 else planes[0]
        return np.asarray(Image.fromarray(image).resize((width, height), filters[method.interpolation]))
    if method.backend == "cv2":
        import cv2

        flags = {
            "nearest": cv2.INTER_NEAREST,
            "linear": cv2.INTER_LINEAR,
            "cubic": cv2.INTER_CUBIC,
            "area": cv2.INTER_AREA,
            "lanczos4": cv2.INTER_LANCZOS4,
        }
        return cv2.resize(image, (width, height), interpolation=flags[method.interpolation])
    if method.backend == "torch":
        import torch
        import torch.nn.functional as F

        tensor = torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32))
        chw = tensor.permute(2, 0, 1)[None] if image.ndim == 3 else tensor[None, None]
        kwargs = {} if method.interpolation == "nearest" else {"align_corners": False, "antialias": method.antialias}
        out = F.interpolate(chw, size=(height, width), mode=method.interpolation, **kwargs)[0]
        out = out.permute(1, 2, 0) if image.ndim == 3 else out[0]
        result = out.numpy()
        if image.dtype == np.uint8 and not keep_float:  # torchvision rounds and clamps uint8 tensors the same way
            result = np.clip(np.round(result), 0, 255).astype(np.uint8)
        return result
    raise ValueError(f"unknown resize backend {method.backend!r}")


def shorter_side_size(height: int, width: int, shorter: int, rounding: str = "int") -> tuple[int, int]:
    """torchvision's ``Resize(int)``: the shorter side becomes ``shorter``, the longer one keeps the aspect, truncated
    (``rounding="int"``) as torchvision does, or rounded to nearest (``"round"``) as some hand-written pipelines do."""
    fix = round if rounding == "round" else int
    if height <= width:
        return shorter, fix(shorter * width / height)
    return fix(shorter * height / width), shorter


def center_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """torchvision's center crop (rounded offsets); pads nothing: the image must be large enough."""
    h, w = image.shape[:2]
    if height > h or width > w:
        raise ValueError(f"cannot center-crop {height}x{width} out of a {h}x{w} image")
    top = int(round((h - height) / 2.0))
    left = int(round((w - width) / 2.0))
    return image[top : top + height, left : left + width]
