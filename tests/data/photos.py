"""Real photos from the scikit-image wheel (no download), and the planted copies the leakage tests look for."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

PHOTOS = ("astronaut", "camera", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "page",
          "text", "moon", "clock", "coins", "grass", "gravel", "brick", "colorwheel", "cell", "microaneurysms")


def photo(name: str, side: int = 192) -> Image.Image:
    """A scikit-image photo as an RGB PIL image, shrunk so its longer side is ``side`` (keeps tests fast)."""
    import skimage.data

    array = getattr(skimage.data, name)()
    if array.dtype != np.uint8:
        array = (array * 255).astype(np.uint8) if array.max() <= 1 else array.astype(np.uint8)
    image = Image.fromarray(array).convert("RGB")
    image.thumbnail((side, side), Image.Resampling.LANCZOS)
    return image


def save(image: Image.Image, path: Path, fmt: str = "PNG", **options) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format=fmt, **options)
    return path


def jpeg_reencode(image: Image.Image, quality: int = 80) -> Image.Image:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def resized(image: Image.Image, factor: float) -> Image.Image:
    return image.resize((round(image.width * factor), round(image.height * factor)), Image.Resampling.BILINEAR)


def cropped(image: Image.Image, pixels: int = 3) -> Image.Image:
    return image.crop((pixels, pixels, image.width - pixels, image.height - pixels))
