"""An inference preprocessing stage for the golden tests: a photo file -> 1x3x8x8 float32 in [0, 1]."""
from __future__ import annotations

import numpy as np
from PIL import Image


def preprocess(path: str) -> np.ndarray:
    with Image.open(path) as image:
        small = image.convert("RGB").resize((8, 8), Image.BILINEAR)
    return (np.asarray(small, dtype=np.float32) / 255.0).transpose(2, 0, 1)  # CHW, one sample
