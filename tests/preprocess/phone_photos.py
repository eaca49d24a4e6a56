"""Phone-style sample folders made from scikit-image's real photographs (EXIF tags written with Pillow)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import skimage
from PIL import Image

SKIMAGE_DATA = Path(skimage.__file__).parent / "data"
ORIENTATION_TAG = 0x0112


def _photo(name: str) -> Image.Image:
    return Image.open(SKIMAGE_DATA / name).convert("RGB")


def exif_jpegs(folder: Path) -> dict[str, int]:
    """Five JPEGs as a phone writes them: four carry an EXIF orientation tag (6, 8, 3, 6), one does not."""
    tags = {"a_astronaut.jpg": ("astronaut.png", 6), "b_chelsea.jpg": ("chelsea.png", 8),
            "c_coffee.jpg": ("coffee.png", 3), "d_rocket.jpg": ("rocket.jpg", 6),
            "e_motorcycle.jpg": ("motorcycle_left.png", 0)}
    for out, (name, tag) in tags.items():
        exif = Image.Exif()
        if tag:
            exif[ORIENTATION_TAG] = tag
        _photo(name).save(folder / out, "JPEG", quality=92, exif=exif.tobytes())
    return {out: tag for out, (_, tag) in tags.items()}


def rgba_pngs(folder: Path) -> None:
    """Two photos with transparent regions (a soft-edged disc kept, the rest transparent) and one opaque photo."""
    for out, name in (("a_chelsea_rgba.png", "chelsea.png"), ("b_coffee_rgba.png", "coffee.png")):
        image = _photo(name)
        w, h = image.size
        yy, xx = np.mgrid[:h, :w]
        distance = np.hypot((xx - w / 2) / (w / 2), (yy - h / 2) / (h / 2))
        alpha = np.clip((1.0 - distance) * 4.0, 0.0, 1.0) * 255.0
        rgba = np.dstack([np.asarray(image), alpha.astype(np.uint8)])
        Image.fromarray(rgba, "RGBA").save(folder / out)
    _photo("astronaut.png").save(folder / "c_astronaut.png")


def palette_pngs(folder: Path) -> None:
    """Two photos saved as 256-colour palette PNGs (mode P) and one RGB photo."""
    for out, name in (("a_coffee_p.png", "coffee.png"), ("b_astronaut_p.png", "astronaut.png")):
        _photo(name).convert("P", palette=Image.Palette.ADAPTIVE, colors=256).save(folder / out)
    _photo("chelsea.png").save(folder / "c_chelsea.png")


# (photo, width) cropped to a height of 300: 256·w/300 has a fraction ≥ .5 only for widths 451 and 480.
ROUNDING_CROPS = (("astronaut.png", 400), ("coffee.png", 420), ("rocket.jpg", 450), ("chelsea.png", 451),
                  ("coffee.png", 480), ("astronaut.png", 360), ("rocket.jpg", 375), ("motorcycle_left.png", 345))


def rounding_crops(folder: Path) -> list[str]:
    """Eight crops of real photos, 300 px high; returns the names on which int() and round() differ."""
    differ = []
    for i, (name, width) in enumerate(ROUNDING_CROPS):
        out = f"{i}_{Path(name).stem}_{width}.png"
        _photo(name).crop((0, 0, width, 300)).save(folder / out)
        if int(256 * width / 300) != round(256 * width / 300):
            differ.append(out)
    return differ


def color_photos(folder: Path) -> None:
    for name in ("astronaut.png", "chelsea.png", "coffee.png"):
        _photo(name).save(folder / name)
