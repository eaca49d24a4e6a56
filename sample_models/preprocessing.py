"""Sample preprocessing stages: clean train/val/infer pipelines, an equivalent-but-different one,
and one planted bug per ``preprocess-audit`` finding code.

Every function takes a sample path (str) and returns what a model would see. The
clean pipeline is torchvision's ImageNet eval transform written out by hand:
PIL decode → RGB → resize shorter side to 256 (bilinear, antialiased) → center crop
224 → /255 → normalize → CHW float32.
"""
from __future__ import annotations

import random

import cv2
import numpy as np
import torch
from PIL import Image

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
RESIZE, CROP = 256, 224


def _pil_rgb(path: str) -> Image.Image:
    with Image.open(path) as image:
        return image.convert("RGB")


def _shorter_side(width: int, height: int, shorter: int) -> tuple[int, int]:
    if height <= width:
        return int(shorter * width / height), shorter
    return shorter, int(shorter * height / width)


def _center_crop(array: np.ndarray, size: int) -> np.ndarray:
    h, w = array.shape[:2]
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return array[top : top + size, left : left + size]


def _pil_resize_crop(image: Image.Image) -> np.ndarray:
    resized = image.resize(_shorter_side(*image.size, RESIZE), Image.Resampling.BILINEAR)
    return _center_crop(np.asarray(resized), CROP)


def _normalize_chw(hwc_uint8: np.ndarray, mean=MEAN, std=STD) -> torch.Tensor:
    tensor = torch.from_numpy(np.array(hwc_uint8, copy=True)).permute(2, 0, 1).float().div(255.0)
    return (tensor - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)


# --- clean pipelines -----------------------------------------------------------------------------------


def train_transform(path: str) -> torch.Tensor:
    """Training preprocessing with augmentation switched off (what the model learned from)."""
    return _normalize_chw(_pil_resize_crop(_pil_rgb(path)))


def val_transform(path: str) -> torch.Tensor:
    return _normalize_chw(_pil_resize_crop(_pil_rgb(path)))


def infer_transform(path: str) -> torch.Tensor:
    return _normalize_chw(_pil_resize_crop(_pil_rgb(path)))


def train_augmented(path: str) -> torch.Tensor:
    """Training with a random horizontal flip: nondeterministic on purpose (mark the stage augmented)."""
    tensor = train_transform(path)
    return torch.flip(tensor, dims=[2]) if random.random() < 0.5 else tensor


def infer_equivalent(path: str) -> np.ndarray:
    """Different code, same result: OpenCV decode + explicit BGR→RGB, PIL resize, fused affine in numpy, HWC→CHW."""
    bgr = cv2.imread(path, cv2.IMREAD_COLOR)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    cropped = _pil_resize_crop(Image.fromarray(rgb))
    scale = (1.0 / (255.0 * np.asarray(STD, np.float32))).astype(np.float32)
    shift = (np.asarray(MEAN, np.float32) / np.asarray(STD, np.float32)).astype(np.float32)
    return np.ascontiguousarray((cropped.astype(np.float32) * scale - shift).transpose(2, 0, 1))


def train_unnormalized(path: str) -> torch.Tensor:
    """ToTensor only: CHW float in 0–1 (the reference for the scale bug)."""
    return torch.from_numpy(np.array(_pil_resize_crop(_pil_rgb(path)), copy=True)).permute(2, 0, 1).float() / 255.0


# --- planted bugs, one per finding code ----------------------------------------------------------------


def infer_bgr(path: str) -> torch.Tensor:
    """channel_order: cv2.imread gives BGR and nobody converts it."""
    return _normalize_chw(_pil_resize_crop(Image.fromarray(cv2.imread(path, cv2.IMREAD_COLOR))))


def infer_hwc(path: str) -> np.ndarray:
    """layout: the client sends HWC."""
    return _normalize_chw(_pil_resize_crop(_pil_rgb(path))).permute(1, 2, 0).contiguous().numpy()


def infer_unscaled(path: str) -> torch.Tensor:
    """scale: the /255 is missing (0–255 instead of 0–1); compare with train_unnormalized."""
    return torch.from_numpy(np.array(_pil_resize_crop(_pil_rgb(path)), copy=True)).permute(2, 0, 1).float()


def infer_wrong_normalization(path: str) -> torch.Tensor:
    """normalization: someone used (0.5, 0.5, 0.5) for mean and std."""
    return _normalize_chw(_pil_resize_crop(_pil_rgb(path)), mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


def infer_cv2_resize(path: str) -> torch.Tensor:
    """resize: OpenCV INTER_LINEAR (no antialias) instead of PIL's antialiased bilinear."""
    rgb = cv2.cvtColor(cv2.imread(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    h, w = rgb.shape[:2]
    new_w, new_h = _shorter_side(w, h, RESIZE)
    return _normalize_chw(_center_crop(cv2.resize(rgb, (new_w, new_h), interpolation=cv2.INTER_LINEAR), CROP))


def infer_no_crop(path: str) -> torch.Tensor:
    """crop: resize straight to 224x224 instead of 256 + center crop 224."""
    return _normalize_chw(np.asarray(_pil_rgb(path).resize((CROP, CROP), Image.Resampling.BILINEAR)))


def infer_float64(path: str) -> np.ndarray:
    """dtype: the same values, but float64."""
    return train_transform(path).numpy().astype(np.float64)


def val_random_flip(path: str) -> torch.Tensor:
    """nondeterministic: a random flip left on in validation."""
    return train_augmented(path)


def infer_batched(path: str) -> torch.Tensor:
    """shape: an extra batch dimension."""
    return train_transform(path).unsqueeze(0)


def infer_gamma(path: str) -> torch.Tensor:
    """unexplained: a gamma curve (no hypothesis covers it)."""
    rgb = _pil_resize_crop(_pil_rgb(path)).astype(np.float32) / 255.0
    return _normalize_chw((np.sqrt(rgb) * 255.0).round().astype(np.uint8))


def infer_fragile(path: str) -> torch.Tensor:
    """Stage error: no convert("RGB"), so grayscale and RGBA inputs break it."""
    with Image.open(path) as image:
        array = np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 image, got shape {array.shape}")
    return _normalize_chw(_pil_resize_crop(Image.fromarray(array)))


def _cv2_decode(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


def infer_from_bytes(data: bytes) -> torch.Tensor:
    """A serving stage that receives the uploaded bytes (use accepts="bytes")."""
    rgb = cv2.cvtColor(_cv2_decode(data), cv2.COLOR_BGR2RGB)
    return _normalize_chw(_pil_resize_crop(Image.fromarray(rgb)))


# --- declarative recipes (step lists), as they would appear in gapcheck.toml ----------------------------

TRAIN_STEPS = [
    {"op": "decode", "backend": "pil"},
    {"op": "resize", "size": RESIZE, "backend": "pil", "interpolation": "bilinear"},
    {"op": "center_crop", "size": CROP},
    {"op": "scale", "factor": 1.0 / 255.0},
    {"op": "normalize", "mean": list(MEAN), "std": list(STD)},
    {"op": "layout", "to": "chw"},
]
MOBILE_STEPS = [
    {"op": "decode", "backend": "cv2"},
    {"op": "color", "order": "rgb"},
    {"op": "resize", "size": RESIZE, "backend": "cv2", "interpolation": "linear"},
    {"op": "center_crop", "size": CROP},
    {"op": "scale", "factor": 1.0 / 255.0},
    {"op": "normalize", "mean": list(MEAN), "std": list(STD)},
    {"op": "layout", "to": "chw"},
]


# --- faults and hard cases (issue #7): NaN outputs, stages that kill their worker, ambiguous resizes ---


def infer_all_nan(path: str) -> torch.Tensor:
    """nonfinite_output: a 0/0 somewhere upstream turns every value into NaN."""
    return train_transform(path) * float("nan")


def _dies_on(path: str, name: str) -> bool:
    return name in path.rsplit("/", 1)[-1]


def infer_exits_on_coffee(path: str) -> torch.Tensor:
    """A stage that calls os._exit on one sample (user code that 'handles' an error by exiting)."""
    import os

    if _dies_on(path, "coffee"):
        os._exit(1)
    return infer_transform(path)


def infer_segfaults_on_chelsea(path: str) -> torch.Tensor:
    """A stage that segfaults on one sample, as a C extension can (reads address 0)."""
    import ctypes

    if _dies_on(path, "chelsea"):
        ctypes.string_at(0)
    return infer_transform(path)


def infer_always_exits(path: str) -> torch.Tensor:
    """A stage that kills its worker on every sample: nothing can be audited."""
    import os

    os._exit(3)


def train_direct_resize(path: str) -> torch.Tensor:
    """Resize straight to 224x224 with PIL bilinear (antialiased), normalize: the reference for the resize cases."""
    return _normalize_chw(np.asarray(_pil_rgb(path).resize((CROP, CROP), Image.Resampling.BILINEAR)))


def infer_torch_resize_no_antialias(path: str) -> torch.Tensor:
    """resize: torch bilinear without antialias, on float values, straight to 224x224 (as a GPU serving path does).

    On an exact 2x downscale this equals a box filter (and cv2 INTER_AREA): such a sample cannot tell them apart.
    """
    rgb = torch.from_numpy(np.array(_pil_rgb(path), copy=True)).permute(2, 0, 1).float().div(255.0)
    resized = torch.nn.functional.interpolate(rgb[None], size=(CROP, CROP), mode="bilinear", align_corners=False,
                                              antialias=False)[0]
    return (resized - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)


def infer_cv2_area(path: str) -> torch.Tensor:
    """resize: cv2 INTER_AREA straight to 224x224. On an exact 2x downscale cv2 INTER_LINEAR (no antialias) gives
    the very same pixels, so only other samples can tell which one this stage uses."""
    rgb = cv2.cvtColor(cv2.imread(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return _normalize_chw(cv2.resize(rgb, (CROP, CROP), interpolation=cv2.INTER_AREA))
