"""Preprocessing pipelines as users write them, each pair differing in one way a phone photo exposes.

Every stage ends the same way (224x224 center crop of a shorter-side 256 resize with PIL bilinear,
ImageNet normalization, CHW float32), so a pair differs only in how the file is read or resized.
"""
from __future__ import annotations

import cv2
import numpy as np
import torch
from PIL import Image, ImageOps

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def _finish(image: Image.Image, rounding=int) -> torch.Tensor:
    """Shorter side to 256 (longer side truncated by ``int`` as torchvision does, or ``round``), crop 224, normalize."""
    w, h = image.size
    size = (256, rounding(256 * h / w)) if w <= h else (rounding(256 * w / h), 256)
    image = image.resize(size, Image.Resampling.BILINEAR)
    w, h = image.size
    left, top = int(round((w - 224) / 2.0)), int(round((h - 224) / 2.0))
    array = np.asarray(image.crop((left, top, left + 224, top + 224)), np.float32) / 255.0
    if array.ndim == 2:
        return torch.from_numpy(array[None].copy())
    return torch.from_numpy(((array - MEAN) / STD).transpose(2, 0, 1).copy())


def pil_rgb(path: str) -> torch.Tensor:
    """The training pipeline: PIL, .convert('RGB') (no EXIF orientation, alpha dropped)."""
    return _finish(Image.open(path).convert("RGB"))


def pil_rgb_twice(path: str) -> torch.Tensor:
    """The same as pil_rgb, written another way (a clean pair)."""
    with open(path, "rb") as handle:
        image = Image.open(handle)
        image.load()
    return _finish(image.convert("RGB"))


def pil_exif_transposed(path: str) -> torch.Tensor:
    """PIL with the EXIF orientation applied."""
    return _finish(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))


def cv2_imread(path: str) -> torch.Tensor:
    """Inference: cv2.imread (applies the EXIF orientation tag), BGR→RGB, then the same steps."""
    bgr = cv2.imread(path, cv2.IMREAD_COLOR)
    return _finish(Image.fromarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)))


def composite_on_white(path: str) -> torch.Tensor:
    """Transparency composited on a white background."""
    image = Image.open(path).convert("RGBA")
    background = Image.new("RGBA", image.size, (255, 255, 255, 255))
    return _finish(Image.alpha_composite(background, image).convert("RGB"))


def palette_as_indices(path: str) -> torch.Tensor:
    """np.asarray of a palette image gives its indices; stacked to three channels "for grayscale images"."""
    array = np.asarray(Image.open(path))
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    return _finish(Image.fromarray(array.astype(np.uint8)))


def rounded_resize(path: str) -> torch.Tensor:
    """A hand-written resize that rounds the longer side instead of truncating it."""
    return _finish(Image.open(path).convert("RGB"), rounding=round)


def gray_rgb(path: str) -> torch.Tensor:
    """Grayscale with RGB weights on an RGB array."""
    rgb = np.asarray(Image.open(path).convert("RGB"))
    return _finish(Image.fromarray(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)))


def gray_bgr_on_rgb(path: str) -> torch.Tensor:
    """The mistake: cv2.COLOR_BGR2GRAY applied to an RGB array (red and blue weights swapped)."""
    rgb = np.asarray(Image.open(path).convert("RGB"))
    return _finish(Image.fromarray(cv2.cvtColor(rgb, cv2.COLOR_BGR2GRAY)))


def gray_rgb_cv2(path: str) -> torch.Tensor:
    """Grayscale done right with cv2 (a clean pair with gray_rgb)."""
    bgr = cv2.imread(path, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    return _finish(Image.fromarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)))


def torch_resize_no_antialias(path: str) -> torch.Tensor:
    """F.interpolate(antialias=False) to a direct 224x224 (the reference resizes with PIL's antialiased filter)."""
    array = torch.from_numpy(np.asarray(Image.open(path).convert("RGB"), np.float32).transpose(2, 0, 1).copy())
    out = torch.nn.functional.interpolate(array[None], size=(224, 224), mode="bilinear", antialias=False,
                                          align_corners=False)[0] / 255.0
    return (out - torch.from_numpy(MEAN)[:, None, None]) / torch.from_numpy(STD)[:, None, None]


def pil_direct_resize(path: str) -> torch.Tensor:
    """PIL bilinear (antialiased) straight to 224x224."""
    image = Image.open(path).convert("RGB").resize((224, 224), Image.Resampling.BILINEAR)
    array = np.asarray(image, np.float32) / 255.0
    return torch.from_numpy(((array - MEAN) / STD).transpose(2, 0, 1).copy())
