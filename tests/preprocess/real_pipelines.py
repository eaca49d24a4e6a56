"""Preprocessing as real users write it: timm's eval transforms (``resolve_data_config`` / ``create_transform``),
torchvision's classic Resize + CenterCrop, hand-written PIL / OpenCV / numpy server ports, grayscale readers.

Loaded by file path (``tests/preprocess/real_pipelines.py:timm_095``) in the audit's worker processes, and imported
by the tests for in-process replays. timm and torchvision's transforms come from torchvision's definitions in
.venv/zoo-site (scripts/setup_zoo.sh), imported without its compiled ops; every transform is built at import.
"""
from __future__ import annotations

import math

import cv2
import numpy as np
import torch
from PIL import Image, ImageFilter, ImageOps

from sample_models import zoo

with zoo.torchvision_models():
    import timm
    from timm.data import create_transform, resolve_data_config
    from torchvision import transforms as T

    _CONFIG = resolve_data_config({}, model=timm.create_model("resnet18", pretrained=False))  # crop_pct 0.95, bicubic
    CROP_PCTS = (0.875, 0.9, 0.95, 1.0)
    TIMM_EVAL = {pct: create_transform(**{**_CONFIG, "crop_pct": pct}) for pct in CROP_PCTS}
    _TO_TENSOR = [T.ToTensor(), T.Normalize(_CONFIG["mean"], _CONFIG["std"])]
    TV_256 = T.Compose([T.Resize(256), T.CenterCrop(224), *_TO_TENSOR])  # torchvision's reference classic
    TV_235 = T.Compose([T.Resize(235), T.CenterCrop(224), *_TO_TENSOR])
    # timm's crop_mode='squash' (dm_nfnet_f1's pretrained config: crop_pct 0.91): Resize((246, 246)) + CenterCrop(224)
    TIMM_SQUASH_091 = create_transform(**{**_CONFIG, "crop_pct": 0.91, "crop_mode": "squash"})

MEAN = np.array(_CONFIG["mean"], np.float32)
STD = np.array(_CONFIG["std"], np.float32)
# the declared steps of timm's crop_pct 0.95 eval transform (floor(224 / 0.95) = 235, PIL bicubic)
TIMM_095_STEPS = [
    {"op": "decode", "backend": "pil"},
    {"op": "resize", "size": math.floor(224 / 0.95), "backend": "pil", "interpolation": "bicubic"},
    {"op": "center_crop", "size": 224},
    {"op": "scale", "factor": 1.0 / 255.0},
    {"op": "normalize", "mean": [float(m) for m in MEAN], "std": [float(s) for s in STD]},
    {"op": "layout", "to": "chw"},
]


def _rgb(path: str) -> Image.Image:
    with Image.open(path) as image:
        return image.convert("RGB")


def _timm(pct: float):
    def stage(path: str) -> torch.Tensor:
        return TIMM_EVAL[pct](_rgb(path))

    stage.__name__ = f"timm_{round(pct * 1000):04d}"
    return stage


timm_0875, timm_0900, timm_0950, timm_1000 = (_timm(pct) for pct in CROP_PCTS)


def tv_256(path: str) -> torch.Tensor:
    return TV_256(_rgb(path))


def tv_235(path: str) -> torch.Tensor:
    return TV_235(_rgb(path))


def timm_0950_bgr(path: str) -> torch.Tensor:
    """timm's transform fed OpenCV's decode without cv2.cvtColor (BGR)."""
    return TIMM_EVAL[0.95](Image.fromarray(cv2.imread(path)))


def timm_0950_exif(path: str) -> torch.Tensor:
    with Image.open(path) as image:
        return TIMM_EVAL[0.95](ImageOps.exif_transpose(image).convert("RGB"))


def _resize_crop(rgb: np.ndarray, shorter: int, resize) -> np.ndarray:
    h, w = rgb.shape[:2]
    nh, nw = (shorter, int(shorter * w / h)) if h <= w else (int(shorter * h / w), shorter)
    resized = resize(rgb, nh, nw)
    top, left = int(round((nh - 224) / 2.0)), int(round((nw - 224) / 2.0))
    return resized[top:top + 224, left:left + 224]


def _numpy_normalized(hwc_uint8: np.ndarray) -> torch.Tensor:
    """numpy all the way, then one torch.from_numpy: no torch call runs on the image."""
    values = (hwc_uint8.astype(np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(values.transpose(2, 0, 1).copy())


def _pil_resize(filter_: Image.Resampling):
    return lambda rgb, h, w: np.asarray(Image.fromarray(rgb).resize((w, h), filter_))


def cv2_cubic_235(path: str) -> torch.Tensor:
    """A cv2 port of timm's crop_pct 0.95 eval: INTER_CUBIC (no antialias) instead of PIL bicubic."""
    rgb = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
    return _numpy_normalized(_resize_crop(rgb, 235, lambda a, h, w: cv2.resize(a, (w, h), interpolation=cv2.INTER_CUBIC)))


def numpy_bilinear_235(path: str) -> torch.Tensor:
    """PIL bilinear where timm uses bicubic, in numpy (the whole stage is opaque to the tracer)."""
    return _numpy_normalized(_resize_crop(np.asarray(_rgb(path)), 235, _pil_resize(Image.Resampling.BILINEAR)))


def numpy_bgr_235(path: str) -> torch.Tensor:
    """timm's geometry and method on OpenCV's BGR decode, in numpy."""
    return _numpy_normalized(_resize_crop(cv2.imread(path), 235, _pil_resize(Image.Resampling.BICUBIC)))


def pil_bilinear_256_exif(path: str) -> torch.Tensor:
    """EXIF applied, then the classic 256 / 224 with PIL bilinear."""
    with Image.open(path) as image:
        rgb = np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
    return _numpy_normalized(_resize_crop(rgb, 256, _pil_resize(Image.Resampling.BILINEAR)))


def _blurred(rgb: np.ndarray) -> torch.Tensor:
    """A pipeline replay cannot reproduce (a Gaussian blur before normalizing): only the direct fit explains pairs."""
    image = Image.fromarray(np.ascontiguousarray(rgb)).resize((160, 160), Image.Resampling.BILINEAR)
    return _numpy_normalized(np.asarray(image.filter(ImageFilter.GaussianBlur(1.5))))


def blurred_rgb(path: str) -> torch.Tensor:
    return _blurred(np.asarray(_rgb(path)))


def blurred_bgr(path: str) -> torch.Tensor:
    return _blurred(cv2.imread(path))


def _gray_tensor(gray: np.ndarray) -> torch.Tensor:
    resized = Image.fromarray(gray).resize((128, 128), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.asarray(resized, np.float32) / 255.0)[None]


def gray_pil(path: str) -> torch.Tensor:
    with Image.open(path) as image:
        return _gray_tensor(np.asarray(image.convert("L")))


def gray_cv2_imread(path: str) -> torch.Tensor:
    """cv2.IMREAD_GRAYSCALE: a JPEG's luma plane, never decoded to RGB."""
    return _gray_tensor(cv2.imread(path, cv2.IMREAD_GRAYSCALE))


def gray_cv2_cvtcolor(path: str) -> torch.Tensor:
    return _gray_tensor(cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2GRAY))


def from_bytes(data: bytes) -> torch.Tensor:
    """A server stage that receives the request body."""
    import io

    with Image.open(io.BytesIO(data)) as image:
        return TIMM_EVAL[0.95](image.convert("RGB"))


# --- the second review (D5-D7): a batch axis, a tensor resize, timm's squash, grayscale resized two ways -------------

def timm_0950_batched(path: str) -> torch.Tensor:
    """timm's transform, then x[None] as a server does before the model: the same values with a batch axis of 1."""
    return TIMM_EVAL[0.95](_rgb(path))[None]


def timm_squash_091(path: str) -> torch.Tensor:
    return TIMM_SQUASH_091(_rgb(path))


def torch_tensor_resize(path: str) -> torch.Tensor:
    """PIL decode, then F.interpolate on the tensor without antialias (a common serving shortcut), crop, normalize."""
    x = torch.from_numpy(np.asarray(_rgb(path)).copy()).permute(2, 0, 1).float().div(255.0)
    h, w = x.shape[1:]
    size = (235, int(w * 235 / h)) if h <= w else (int(h * 235 / w), 235)
    x = torch.nn.functional.interpolate(x[None], size=size, mode="bicubic", align_corners=False, antialias=False)[0]
    top, left = int(round((size[0] - 224) / 2.0)), int(round((size[1] - 224) / 2.0))
    x = x[:, top:top + 224, left:left + 224]
    return (x - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)


def _gray_l(path: str) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("L"))


def gray_l_cv2_linear(path: str) -> np.ndarray:
    """PIL's grayscale resized with cv2 INTER_LINEAR (gray_pil resizes it with PIL bilinear), one channel."""
    return (cv2.resize(_gray_l(path), (128, 128), interpolation=cv2.INTER_LINEAR).astype(np.float32) / 255.0)[None]


def gray3_pil(path: str) -> np.ndarray:
    """gray_pil repeated into three channels (a grayscale model fed to an RGB network)."""
    return np.repeat(gray_pil(path).numpy(), 3, axis=0)


def gray3_cv2_linear(path: str) -> np.ndarray:
    return np.repeat(gray_l_cv2_linear(path), 3, axis=0)


def gray_cv2_gray_linear(path: str) -> np.ndarray:
    """cv2.COLOR_BGR2GRAY, then INTER_LINEAR."""
    gray = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2GRAY)
    return (cv2.resize(gray, (128, 128), interpolation=cv2.INTER_LINEAR).astype(np.float32) / 255.0)[None]


def gray_cv2_gray_area(path: str) -> np.ndarray:
    gray = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2GRAY)
    return (cv2.resize(gray, (128, 128), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0)[None]
