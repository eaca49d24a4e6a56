"""Seeding: every generator a training run draws from, and DataLoaders that replay the same order.

``seed_everything`` seeds Python's ``random``, NumPy's legacy global generator and torch (CPU and
every CUDA device), and with ``deterministic=True`` asks torch for deterministic kernels
(``use_deterministic_algorithms``, cuDNN deterministic and benchmark off, and the cuBLAS workspace
setting CUDA needs for deterministic matmuls). ``deterministic_loader_kwargs`` gives a DataLoader its
own seeded generator (the shuffle order and the per-worker base seeds come from it, not from the
global state another library may have consumed) and a ``worker_init_fn`` that seeds ``random`` and
NumPy inside each worker, which torch does not do itself.

:class:`RngState` snapshots and restores all of it, so a check (``check_determinism``, the pytest
fixture) can seed without leaving the caller's process changed.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

from gapcheck.errors import UsageError

_CUBLAS_KEY = "CUBLAS_WORKSPACE_CONFIG"


@dataclass(frozen=True)
class SeedReport:
    """What :func:`seed_everything` set."""

    seed: int
    deterministic: bool
    cuda_devices: int
    cublas_workspace_config: str | None


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise UsageError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    return seed


def seed_everything(seed: int, deterministic: bool = False, *, warn_only: bool = False) -> SeedReport:
    """Seed ``random``, NumPy and torch (CPU and CUDA); with ``deterministic`` also ask for deterministic kernels.

    ``warn_only`` makes torch warn instead of raise when an op has no deterministic implementation.
    """
    import numpy as np
    import torch

    _check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too (lazily, when CUDA initialises)
    if deterministic:
        # cuBLAS reads this when its handle is created; setting it later has no effect, hence "setdefault".
        os.environ.setdefault(_CUBLAS_KEY, ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return SeedReport(seed=seed, deterministic=deterministic,
                      cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0,
                      cublas_workspace_config=os.environ.get(_CUBLAS_KEY))


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: seed ``random`` and NumPy in a DataLoader worker from torch's per-worker seed.

    torch seeds itself per worker (base_seed + worker_id, the base drawn from the loader's generator) but not
    ``random`` or NumPy, so every worker would otherwise produce the same NumPy augmentations.
    """
    import numpy as np
    import torch

    worker_seed = torch.initial_seed() % 2**32
    random.seed(worker_seed)
    np.random.seed(worker_seed)


def deterministic_loader_kwargs(seed: int) -> dict[str, Any]:
    """Keyword arguments for ``DataLoader(...)``: a generator seeded with ``seed`` and :func:`seed_worker`."""
    import torch

    generator = torch.Generator()
    generator.manual_seed(_check_seed(seed))
    return {"generator": generator, "worker_init_fn": seed_worker}


@dataclass(frozen=True)
class RngState:
    """The global random state and determinism flags, to put back after seeding."""

    python: Any
    numpy: Any
    torch_cpu: Any
    torch_cuda: Any
    deterministic: bool
    deterministic_warn_only: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    cublas_workspace_config: str | None

    @classmethod
    def capture(cls) -> "RngState":
        import numpy as np
        import torch

        return cls(python=random.getstate(), numpy=np.random.get_state(), torch_cpu=torch.get_rng_state(),
                   torch_cuda=torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
                   deterministic=torch.are_deterministic_algorithms_enabled(),
                   deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
                   cudnn_deterministic=torch.backends.cudnn.deterministic,
                   cudnn_benchmark=torch.backends.cudnn.benchmark,
                   cublas_workspace_config=os.environ.get(_CUBLAS_KEY))

    def restore(self) -> None:
        import numpy as np
        import torch

        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)
        torch.use_deterministic_algorithms(self.deterministic, warn_only=self.deterministic_warn_only)
        torch.backends.cudnn.deterministic = self.cudnn_deterministic
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        if self.cublas_workspace_config is None:
            os.environ.pop(_CUBLAS_KEY, None)
        else:
            os.environ[_CUBLAS_KEY] = self.cublas_workspace_config
