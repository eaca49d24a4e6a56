"""The declared preprocessing of the photo tests: a PNG -> a normalized 3x32x32 float32 tensor (ImageNet statistics)."""
from __future__ import annotations

import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)[:, None, None]
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)[:, None, None]


def photo_32(path: str) -> np.ndarray:
    from skimage.io import imread
    from skimage.transform import resize

    image = imread(path)
    image = np.stack([image] * 3, axis=-1) if image.ndim == 2 else image[..., :3]
    small = resize(image, (32, 32), anti_aliasing=True).astype(np.float32)  # [0, 1]
    return (small.transpose(2, 0, 1) - MEAN) / STD


def photo_48(path: str) -> np.ndarray:
    """MTCNN's ONet input: a 48x48 crop scaled as facenet-pytorch does ((x - 127.5) / 128)."""
    from skimage.io import imread
    from skimage.transform import resize

    image = imread(path)
    image = np.stack([image] * 3, axis=-1) if image.ndim == 2 else image[..., :3]
    small = resize(image, (48, 48), anti_aliasing=True, preserve_range=True).astype(np.float32)
    return (small.transpose(2, 0, 1) - 127.5) / 128.0


def word_ids(text: str) -> list[int]:
    """A tokenizer stage for the tiny text model (vocabulary 1000): each word's stable id (real sentences, ids in
    range; sample_models.transformer takes ids in [0, 1000))."""
    import zlib

    return [1 + zlib.crc32(word.lower().encode()) % 998 for word in text.split()]
