"""A torch Dataset callable for the tests (``dataset_fixture:val_dataset``): what a DataLoader would yield."""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from tests.data.photos import photo


class PhotoTensors(Dataset):
    def __init__(self) -> None:
        self.images = [photo("astronaut"), photo("coins")]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        array = np.asarray(self.images[index], dtype=np.float32) / 255.0
        return torch.from_numpy(array).permute(2, 0, 1), index


def val_dataset() -> Dataset:
    return PhotoTensors()


class FeatureRows(Dataset):
    """1-D feature vectors with a label: a tabular Dataset (``shift`` moves feature 1)."""

    def __init__(self, shift: float, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(3000, 3)).astype(np.float32)
        self.x[:, 1] += shift
        self.y = rng.integers(0, 2, 3000)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        return torch.from_numpy(self.x[index]), int(self.y[index])


def train_rows() -> Dataset:
    return FeatureRows(0.0, 1)


def val_rows() -> Dataset:
    return FeatureRows(0.8, 2)
