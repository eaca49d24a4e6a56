"""Stages a user writes when one side of a model converts photos to grayscale and the other keeps colour, with PIL,
OpenCV, scikit-image and torch, loaded by path as preprocess-audit loads a user's file.

What tests/preprocess/test_grayscale_against_colour.py audits on real scikit-image photos.
"""
from __future__ import annotations

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from skimage.color import rgb2gray

SIDE = 64


def _pil(path: str, mode: str) -> np.ndarray:
    return np.asarray(Image.open(path).convert(mode).resize((SIDE, SIDE), Image.BILINEAR), dtype=np.float32) / 255.0


def pil_rgb_chw(path: str) -> np.ndarray:
    """PIL colour, bilinear to 64x64, in 0..1, as a torch model takes it: (3, H, W)."""
    return np.ascontiguousarray(_pil(path, "RGB").transpose(2, 0, 1))


def pil_rgb_hwc(path: str) -> np.ndarray:
    """The same colour picture channel-last: (H, W, 3)."""
    return _pil(path, "RGB")


def pil_gray_hw(path: str) -> np.ndarray:
    """PIL convert('L'), bilinear to 64x64, in 0..1: (H, W)."""
    return _pil(path, "L")


def pil_gray_chw(path: str) -> np.ndarray:
    """The same grayscale picture as a one-channel tensor: (1, H, W)."""
    return pil_gray_hw(path)[None]


def pil_gray_hwc(path: str) -> np.ndarray:
    """The same grayscale picture channel-last: (H, W, 1)."""
    return pil_gray_hw(path)[..., None]


def pil_gray_repeated(path: str) -> np.ndarray:
    """The grayscale picture repeated into three channels, as a model made for RGB input gets it: (3, H, W)."""
    return np.repeat(pil_gray_hw(path)[None], 3, axis=0)


def pil_gray_halved(path: str) -> np.ndarray:
    """PIL grayscale on another value scale (0..0.5): the conversion and a value difference."""
    return pil_gray_hw(path) * 0.5


def cv2_bgr_hwc(path: str) -> np.ndarray:
    """OpenCV's decode, never converted to RGB, INTER_AREA to 64x64: (H, W, 3) in BGR order."""
    return cv2.resize(cv2.imread(path), (SIDE, SIDE), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0


def cv2_gray(path: str) -> np.ndarray:
    """cv2.cvtColor(..., COLOR_BGR2GRAY), INTER_AREA to 64x64: (H, W)."""
    gray = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2GRAY)
    return cv2.resize(gray, (SIDE, SIDE), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0


def skimage_gray(path: str) -> np.ndarray:
    """scikit-image's rgb2gray (ITU-R 709 weights) of the PIL-resized colour picture: (H, W)."""
    rgb = np.asarray(Image.open(path).convert("RGB").resize((SIDE, SIDE), Image.BILINEAR))
    return rgb2gray(rgb).astype(np.float32)


def torch_rgb(path: str) -> torch.Tensor:
    """A tensor server: the decoded photo resized with F.interpolate: (3, H, W)."""
    x = torch.from_numpy(np.array(Image.open(path).convert("RGB"))).permute(2, 0, 1).float() / 255
    return F.interpolate(x[None], size=(SIDE, SIDE), mode="bilinear", antialias=True, align_corners=False)[0]


def torch_gray(path: str) -> torch.Tensor:
    """The same, then grayscale by the ITU-R 601 weights in torch: (1, H, W)."""
    x = torch_rgb(path)
    return (x[0] * 0.299 + x[1] * 0.587 + x[2] * 0.114)[None]


def pil_gray_after_resize(path: str) -> np.ndarray:
    """Colour resized first, then convert('L'): the grayscale of train's very pixels (H, W)."""
    image = Image.open(path).convert("RGB").resize((SIDE, SIDE), Image.BILINEAR).convert("L")
    return np.asarray(image, dtype=np.float32) / 255.0
