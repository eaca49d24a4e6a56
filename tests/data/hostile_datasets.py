"""Dataset callables that misbehave the ways user code does (``hostile_datasets:<name>`` in the tests)."""
from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class _Rows(Dataset):
    def __init__(self, size: int, sample) -> None:
        self.size, self.sample = size, sample

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        return self.sample(index)


def _every_third_raises(index: int):
    if index % 3 == 0:
        raise RuntimeError(f"cannot open record {index}")
    return torch.full((4,), float(index)), index % 2


def _sleeps_on_one(index: int):
    if index == 1:
        time.sleep(30)
    return torch.full((4,), float(index)), 0


def raises() -> Dataset:
    return _Rows(30, _every_third_raises)


def strings() -> Dataset:
    return _Rows(10, lambda index: ("a caption", {"id": index}))


def ragged() -> Dataset:
    return _Rows(20, lambda index: (torch.ones(3 + index % 2), 0))


def one_hangs() -> Dataset:
    return _Rows(6, _sleeps_on_one)


def negative_len() -> Dataset:
    return _Rows(-1, _every_third_raises)


def huge() -> Dataset:
    return _Rows(10**12, _every_third_raises)


def factory_fails() -> Dataset:
    raise ValueError("the bucket is not mounted")
