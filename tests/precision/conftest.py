"""Real photos (scikit-image ships them) as a calibration folder and a separate verification file (no photo in both:
skimage.data.cat is chelsea, which calibration_unrepresentative caught)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

CALIBRATION_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
                      "colorwheel")
VERIFICATION_PHOTOS = ("logo", "camera", "coins", "moon", "horse", "clock", "grass", "brick")


def _crops(name: str) -> list[np.ndarray]:
    import skimage.data

    image = getattr(skimage.data, name)()
    h, w = image.shape[:2]
    side = min(h, w) // 2
    image = image.astype(np.uint8) * 255 if image.dtype == bool else image
    return [image[:side, :side], image[h - side:, w - side:]]  # two different regions of each photo


def write_photos(folder: Path, names: tuple[str, ...]) -> Path:
    from skimage.io import imsave

    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        for i, crop in enumerate(_crops(name)):
            imsave(folder / f"{name}_{i}.png", np.ascontiguousarray(crop), check_contrast=False)
    return folder


def stacked(folder: Path, stage) -> np.ndarray:
    return np.stack([stage(str(p)) for p in sorted(folder.iterdir())])


@pytest.fixture(scope="session")
def photo_dirs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("photos")
    return write_photos(root / "calibration", CALIBRATION_PHOTOS), write_photos(root / "verification",
                                                                                VERIFICATION_PHOTOS)


@pytest.fixture(scope="session")
def photos_32(photo_dirs, tmp_path_factory) -> tuple[Path, Path]:
    """(calibration folder of PNGs, verification .npz of other photos, preprocessed by the declared stage)."""
    from tests.precision.stages import photo_32

    calibration, verification = photo_dirs
    path = tmp_path_factory.mktemp("verification") / "photos32.npz"
    np.savez(path, x=stacked(verification, photo_32))
    return calibration, path
