"""Content hashes for leakage: file bytes, decoded pixels, perceptual hashes, canonical table rows.

- ``file_sha256``: the bytes as stored (a byte-identical copy).
- ``pixel_sha256``: :func:`gapcheck.tensors.fingerprint` of the decoded pixels (H×W×C uint8, no EXIF
  rotation applied), so a lossless re-save or an EXIF-stripped copy still matches.
- pHash and dHash (imagehash, 64 bits each) through one fixed decode path (:func:`decode_path`):
  PIL decode → EXIF orientation applied (:func:`upright`) → RGB → imagehash. The path is part of the hash:
  another decoder gives other bits. The orientation matters: a phone photo stored sideways with an EXIF
  orientation tag is shown upright by every viewer and data loader that honours the tag, so a copy saved that
  way is the same picture, yet its stored pixels hash 30+ bits away (a new user's review missed one).
  They are packed into ``uint64`` so the search is a numpy XOR + popcount.
- table rows: two 64-bit pandas hashes with different keys (128 bits) over the canonical row:
  columns sorted by name, numbers as float64 (so 1 and 1.0 agree, -0.0 is 0.0), text as str, nulls as one token.
"""
from __future__ import annotations

import hashlib
import io
import warnings
from typing import Any

import numpy as np

from gapcheck.tensors import fingerprint

HASH_BITS = 64
# Refuse decompression bombs before decoding. 2**27 px (e.g. 16384 x 8192) decodes to ~0.4 GB as RGB and peaks
# around 1.5-2 GB per worker through hashing; PIL's own limit (~179 Mpx) is higher and its warning at ~89 Mpx would
# only print to the console, so the size check here is the one that counts and PIL's warning is silenced.
MAX_PIXELS = 1 << 27


def decode_path() -> str:
    import imagehash
    import PIL

    return f"PIL {PIL.__version__} decode → RGB → imagehash {imagehash.__version__} phash(8)+dhash(8)"


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decode_image(data: bytes) -> Any:
    """A decoded PIL image (pixels loaded); raises on corrupt data or an oversized image."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image = Image.open(io.BytesIO(data))
    width, height = image.size
    if width * height > MAX_PIXELS:
        raise ValueError(f"image of {width}x{height} pixels is larger than the {MAX_PIXELS} pixel limit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image.load()
    return image


def rgb_pixels(image: Any) -> np.ndarray:
    return np.asarray(image.convert("RGB"), dtype=np.uint8)


def pixel_sha256(pixels: np.ndarray) -> str:
    return fingerprint(np.ascontiguousarray(pixels))


def _pack(bits: np.ndarray) -> int:
    return int.from_bytes(np.packbits(bits.astype(bool).ravel()).tobytes(), "big")


EXIF_ORIENTATION = 0x0112


def orientation(image: Any) -> int:
    """``image``'s EXIF orientation tag when it turns or mirrors the image (2-8), else 1 (none, upright, unreadable
    EXIF or a value outside the standard's: the stored orientation is the only one known)."""
    try:
        tag = image.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - unreadable EXIF
        return 1
    return tag if isinstance(tag, int) and tag in range(2, 9) else 1


def upright(image: Any, rgb: Any) -> Any:
    """``rgb`` (``image`` converted to RGB) as it is displayed: turned by ``PIL.ImageOps.exif_transpose`` when
    ``image`` carries an EXIF orientation other than 1, else ``rgb`` itself (no copy for the usual image)."""
    from PIL import ImageOps

    if orientation(image) == 1:
        return rgb
    return ImageOps.exif_transpose(image).convert("RGB")


def perceptual_hashes(rgb_image: Any) -> tuple[int, int]:
    """(pHash, dHash) of an RGB PIL image, each a 64-bit int."""
    import imagehash

    return _pack(imagehash.phash(rgb_image, hash_size=8).hash), _pack(imagehash.dhash(rgb_image, hash_size=8).hash)


def image_from_array(array: np.ndarray) -> Any:
    """A PIL RGB image from a tensor-like array (C×H×W or H×W×C or H×W; floats in [0, 1] are scaled to 0..255)."""
    from PIL import Image

    arr = np.asarray(array)
    if arr.ndim == 3 and arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4):
        arr = np.moveaxis(arr, 0, -1)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.dtype.kind == "f":
        scale = 255.0 if np.nanmax(arr, initial=0.0) <= 1.0 + 1e-6 else 1.0
        arr = np.clip(np.nan_to_num(arr) * scale, 0, 255).round()
    arr = np.clip(arr, 0, 255).astype(np.uint8)
    return Image.fromarray(arr).convert("RGB")


def row_hashes(frame: Any) -> np.ndarray:
    """128-bit canonical row hashes of a DataFrame as an (n, 2) uint64 array."""
    import pandas as pd

    canonical = pd.DataFrame(index=frame.index)
    for column in sorted(frame.columns, key=str):
        values = frame[column]
        if values.dtype.kind in "biuf":
            numbers = values.astype("float64")
            canonical[str(column)] = numbers.where(numbers != 0, 0.0)  # -0.0 and 0.0 are one value
        else:
            canonical[str(column)] = values.map(lambda v: None if _is_null(v) else str(v)).astype(object)
    low = pd.util.hash_pandas_object(canonical, index=False, hash_key="gapcheck-rows-a1").to_numpy(np.uint64)
    high = pd.util.hash_pandas_object(canonical, index=False, hash_key="gapcheck-rows-b2").to_numpy(np.uint64)
    return np.stack([high, low], axis=1) if len(canonical) else np.zeros((0, 2), np.uint64)


def _is_null(value: Any) -> bool:
    try:
        return bool(value != value) or value is None  # NaN is the only value unequal to itself
    except (TypeError, ValueError):
        return False
