"""Stages a user writes with OpenCV and PIL for grayscale models, loaded by path as preprocess-audit loads a user's file.

Grayscale outputs with and without a channel axis of size 1, and OpenCV stages handed the wrong kind of argument (the
file's bytes to cv2.imread, the path to cv2.imdecode or cv2.cvtColor): what tests/preprocess/test_singleton_channel.py
and test_opencv_hints.py audit on real scikit-image photos.
"""
from __future__ import annotations

import cv2
import numpy as np
from PIL import Image

SIDE = 64


def gray_hw(path: str) -> np.ndarray:
    """PIL grayscale, bilinear to 64x64, in 0..1: (H, W)."""
    image = Image.open(path).convert("L").resize((SIDE, SIDE), Image.BILINEAR)
    return np.asarray(image, dtype=np.float32) / 255.0


def gray_chw(path: str) -> np.ndarray:
    """The same picture as a one-channel CHW tensor would be: (1, H, W)."""
    return gray_hw(path)[None]


def gray_hwc(path: str) -> np.ndarray:
    """The same picture channel-last: (H, W, 1)."""
    return gray_hw(path)[..., None]


def gray_bchw(path: str) -> np.ndarray:
    """A batch of one one-channel image: (1, 1, H, W)."""
    return gray_hw(path)[None, None]


def rect_hw(path: str) -> np.ndarray:
    """PIL grayscale, bilinear to 64 wide and 48 high: (48, 64)."""
    image = Image.open(path).convert("L").resize((SIDE, 48), Image.BILINEAR)
    return np.asarray(image, dtype=np.float32) / 255.0


def rect_whc(path: str) -> np.ndarray:
    """The same picture transposed, with a trailing channel axis: (64, 48, 1), (W, H, 1). Squeezed it is (64, 48),
    not (48, 64): another size, not the same picture with an extra axis."""
    return rect_hw(path).T[..., None]


def gray_chw_halved(path: str) -> np.ndarray:
    """(1, H, W) with another value scale: a real value difference on top of the channel axis."""
    return gray_hw(path)[None] * 0.5


def gray_as_rgb(path: str) -> np.ndarray:
    """The grayscale picture repeated into three channels: (3, H, W), another channel count."""
    return np.repeat(gray_hw(path)[None], 3, axis=0)


def cv2_gray_hwc(path: str) -> np.ndarray:
    """OpenCV's grayscale read, resized with INTER_LINEAR (no antialias), kept as (H, W, 1)."""
    image = cv2.resize(cv2.imread(path, cv2.IMREAD_GRAYSCALE), (SIDE, SIDE), interpolation=cv2.INTER_LINEAR)
    return image[..., None].astype(np.float32) / 255.0


# --- OpenCV stages given the wrong kind of argument -----------------------------------------------------------------

def imread_then_gray(path: str) -> np.ndarray:
    """The usual OpenCV server: takes a path. Declared ,bytes, cv2.imread returns None and cvtColor asserts."""
    return cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2GRAY)


def imread_only(path: str) -> np.ndarray | None:
    """Returns cv2.imread's result as it is: None when it was given bytes."""
    return cv2.imread(path)


def imdecode_unwrapped(data: bytes) -> np.ndarray:
    """Bytes straight into cv2.imdecode (it wants np.frombuffer(data, np.uint8)): "Expected Ptr<cv::UMat>"."""
    return cv2.imdecode(data, cv2.IMREAD_GRAYSCALE)  # type: ignore[call-overload]


def gray_of(image: np.ndarray) -> np.ndarray:
    """A stage that expects a decoded array; given a path, cv2.cvtColor refuses the str."""
    return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)



# --- OpenCV stages that get an empty image for another reason: no input-kind advice ---------------------------------

def imread_bad_crop(path: str) -> np.ndarray:
    """Reads the path as it should, then crops rows 5000-5100 of a smaller photo: an empty array, !_src.empty()."""
    image = cv2.imread(path)
    return cv2.cvtColor(image[5000:5100, 0:100], cv2.COLOR_BGR2GRAY)


def imdecode_bad_crop(data: bytes) -> np.ndarray:
    """Decodes the bytes as it should, then crops outside the photo."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return cv2.cvtColor(image[5000:5100, 0:100], cv2.COLOR_BGR2GRAY)


def fromfile_bad_crop(path: str) -> np.ndarray:
    """The unicode-path idiom, cv2.imdecode(np.fromfile(path)), then a crop outside the photo: imdecode named in a
    path stage, but nothing it returned is None."""
    image = cv2.imdecode(np.fromfile(path, np.uint8), cv2.IMREAD_COLOR)
    return cv2.cvtColor(image[5000:5100, 0:100], cv2.COLOR_BGR2GRAY)


def imdecode_of_path(path: str) -> np.ndarray:
    """A stage written for bytes, decoding the path's characters: cv2.imdecode returns None, cvtColor asserts."""
    image = cv2.imdecode(np.frombuffer(path.encode(), np.uint8), cv2.IMREAD_COLOR)
    return cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)


# --- stages that return None: the declaration is advised only when a read of the other input kind is in the code ---

def imread_no_return(path: str) -> None:
    """Reads and resizes the path as it should, then forgets to return: None, nothing to do with the input kind."""
    image = cv2.imread(path)
    cv2.resize(image, (SIDE, SIDE))


def _load(path: str) -> np.ndarray | None:
    return cv2.imread(path)


def imread_via_helper(path: str) -> np.ndarray | None:
    """cv2.imread in a helper of the same module: declared ,bytes, it returns None."""
    return _load(path)


def imdecode_of_path_returned(path: str) -> np.ndarray | None:
    """A stage written for bytes, decoding the path's characters and returning cv2.imdecode's None."""
    return cv2.imdecode(np.frombuffer(path.encode(), np.uint8), cv2.IMREAD_COLOR)
