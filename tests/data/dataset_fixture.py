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
