import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from gapcheck.errors import UsageError
from gapcheck.guards import RngState, deterministic_loader_kwargs, seed_everything


class NumpyAugmented(Dataset):
    """Items drawn from NumPy's global generator, as many augmentation pipelines do."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i, np.random.randint(0, 1_000_000), random.randint(0, 1_000_000)])


def draw():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_seed_everything_seeds_every_generator_and_restores():
    saved = RngState.capture()
    try:
        seed_everything(7)
        first = draw()
        report = seed_everything(7, deterministic=True)
        assert draw() == first
        assert report.deterministic and torch.are_deterministic_algorithms_enabled()
        assert not torch.backends.cudnn.benchmark and report.cublas_workspace_config == ":4096:8"
    finally:
        saved.restore()
    assert not torch.are_deterministic_algorithms_enabled()


def loader_order(seed, workers):
    loader = DataLoader(NumpyAugmented(), batch_size=2, shuffle=True, num_workers=workers,
                        **deterministic_loader_kwargs(seed))
    return torch.cat(list(loader)).tolist()


def test_loader_kwargs_replay_shuffle_and_worker_numpy_seeds():
    torch.manual_seed(0)
    a = loader_order(3, workers=2)
    torch.manual_seed(99)  # the global state does not matter: the loader has its own generator
    b = loader_order(3, workers=2)
    assert a == b
    workers = {}
    for index, drawn, _ in a:
        workers.setdefault(drawn, []).append(index)
    assert len(workers) > 1  # each worker got its own NumPy seed, not the parent's copy


def test_bad_seed_is_a_usage_error():
    with pytest.raises(UsageError):
        seed_everything(-1)
    with pytest.raises(UsageError):
        deterministic_loader_kwargs(2**32)
