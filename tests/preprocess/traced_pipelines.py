"""Preprocessing written as code (torchvision v2 pipelines and plain functions) for the traced-step tests.

Loaded by file path (``tests/preprocess/traced_pipelines.py:train_v2``) in the audit's worker processes.
Each candidate differs from ``train_v2`` in exactly one step.
"""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from sample_models import zoo

with zoo.torchvision_models():  # torchvision's definitions from .venv/zoo-site (scripts/setup_zoo.sh)
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as TF

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def load_rgb(path: str) -> Image.Image:
    with Image.open(path) as image:
        return image.convert("RGB")


def _v2(antialias: bool, mean: list[float] = MEAN) -> v2.Compose:
    return v2.Compose([load_rgb, v2.PILToTensor(), v2.Resize(128, antialias=antialias), v2.CenterCrop(112),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, STD)])


train_v2 = _v2(antialias=False)
train_v2_again = _v2(antialias=False)  # the same pipeline, built separately: a clean pair
infer_v2 = _v2(antialias=True)  # one step differs: antialias


def infer_functional(path: str) -> torch.Tensor:
    """The same steps written as a function with PIL decode and v2 functionals; the resize antialiases."""
    x = torch.from_numpy(np.asarray(load_rgb(path)).copy()).permute(2, 0, 1)
    x = TF.resize(x, [128], antialias=True)
    x = TF.center_crop(x, [112, 112])
    x = TF.to_dtype(x, torch.float32, scale=True)
    return TF.normalize(x, MEAN, STD)


# A declared step list doing what train_v2 does with PIL (the reference for the callable-vs-steps case)
PIL_STEPS = [
    {"op": "decode", "backend": "pil"},
    {"op": "resize", "size": 128, "backend": "pil", "interpolation": "bilinear"},
    {"op": "center_crop", "size": 112},
    {"op": "scale", "factor": 1.0 / 255.0},
    {"op": "normalize", "mean": MEAN, "std": STD},
    {"op": "layout", "to": "chw"},
]


def infer_pil_half_mean(path: str) -> torch.Tensor:
    """PIL resize and crop (opaque to torch), then torch normalization with the wrong mean."""
    image = load_rgb(path)
    w, h = image.size
    size = (int(128 * w / h), 128) if h <= w else (128, int(128 * h / w))
    array = np.asarray(image.resize(size, Image.Resampling.BILINEAR))
    top, left = int(round((array.shape[0] - 112) / 2.0)), int(round((array.shape[1] - 112) / 2.0))
    x = torch.from_numpy(array[top : top + 112, left : left + 112].copy()).permute(2, 0, 1).float() / 255.0
    return (x - torch.tensor([0.5, 0.5, 0.5]).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
