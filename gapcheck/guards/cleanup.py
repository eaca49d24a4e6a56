"""trial_cleanup: end a hyperparameter-search trial (Optuna, Ray Tune) without carrying its memory into the next.

On exit the trial's model, gradients and optimizer state are released — gradients set to None, the
optimizer's state cleared, and (``release_weights=True``) the model's parameters and buffers moved
to the meta device, which frees their storage while the caller's references stay valid objects — then
the garbage collector runs and the CUDA cache is emptied.

Then the guard part: the tensor memory still alive is measured (the storages of every tensor the
garbage collector tracks, each storage counted once, meta tensors excluded) and compared with what
was alive at entry, minus what the cleanup was going to release. More than ``leak_tolerance`` bytes
is a leak — a list of losses kept as tensors, a closure, a global cache — and trips the guard. The
walk over the garbage collector's objects costs tens of milliseconds: fine once per trial, not per step.
"""
from __future__ import annotations

import gc
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gapcheck.codes.guards import TRIAL_LEAK
from gapcheck.findings import Subject
from gapcheck.guards.base import Guarded, Ledger, Mode, TrialLeakError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class CleanupReport:
    released_bytes: int  # parameters, buffers, gradients and optimizer state released
    live_before: int  # tensor bytes alive at entry, not counting what the cleanup releases
    live_after: int  # tensor bytes alive after the cleanup
    cuda_allocated_before: int | None
    cuda_allocated_after: int | None

    @property
    def leaked_bytes(self) -> int:
        return max(0, self.live_after - self.live_before)


def _storage_key(tensor: "torch.Tensor") -> tuple[str, int, int] | None:
    if tensor.device.type == "meta" or tensor.is_sparse:
        return None
    # FakeTensors (left behind by torch.export / the dynamo ONNX exporter elsewhere in the process) hold no
    # memory; asking for their data pointer warns (and will raise in a later torch), so they are skipped by type.
    # The module is only looked up, never imported: if nothing loaded it, no FakeTensor can exist.
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    if fake is not None and issubclass(type(tensor), fake.FakeTensor):
        return None
    try:
        storage = tensor.untyped_storage()
        return (str(tensor.device), storage.data_ptr(), storage.nbytes())
    except (RuntimeError, NotImplementedError):  # tensor subclasses and wrappers without a plain storage
        return None


def _live_storages() -> set[tuple[str, int, int]]:
    import torch

    keys = set()
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):  # type(), not isinstance: proxies may lie about __class__
            key = _storage_key(obj)
            if key is not None:
                keys.add(key)
    return keys


def _trial_tensors(model: Any, optimizer: Any, release_weights: bool) -> list["torch.Tensor"]:
    import torch

    tensors: list[torch.Tensor] = []
    if release_weights:
        tensors += list(model.parameters()) + list(model.buffers())
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    if optimizer is not None:
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
        for group in optimizer.param_groups:
            tensors += [p.grad for p in group["params"] if p.grad is not None]
    return tensors


def _nbytes(keys: Iterable[tuple[str, int, int]]) -> int:
    return sum(size for _, _, size in keys)


class trial_cleanup(Guarded):  # noqa: N801 - used like a function: ``with guards.trial_cleanup(model, optimizer):``
    """Release a trial's model and optimizer on exit, empty caches, and check nothing else stayed alive."""

    def __init__(self, model: "torch.nn.Module", optimizer: "torch.optim.Optimizer | None" = None, *,
                 release_weights: bool = True, leak_tolerance: int = 1 << 20, mode: Mode | str = Mode.RAISE) -> None:
        self.model = model
        self.optimizer = optimizer
        self.release_weights = release_weights
        self.leak_tolerance = leak_tolerance
        self.ledger = Ledger(Mode.parse(mode), TrialLeakError)
        self.report: CleanupReport | None = None
        self._before = 0
        self._cuda_before: int | None = None

    def __enter__(self) -> "trial_cleanup":
        # No gc.collect() here (it costs ~0.4 s in a big process): garbage alive now only raises the baseline,
        # which can hide a leak of its size but never invents one.
        released = {_storage_key(t) for t in _trial_tensors(self.model, self.optimizer, self.release_weights)}
        self._before = _nbytes(_live_storages() - released)
        self._cuda_before = _cuda_allocated()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        released = _nbytes({k for k in map(_storage_key, _trial_tensors(self.model, self.optimizer,
                                                                          self.release_weights)) if k})
        self._release()
        gc.collect()
        _empty_cuda_cache()
        self.report = CleanupReport(released_bytes=released, live_before=self._before,
                                    live_after=_nbytes(_live_storages()), cuda_allocated_before=self._cuda_before,
                                    cuda_allocated_after=_cuda_allocated())
        if exc_type is None and self.report.leaked_bytes > self.leak_tolerance:
            # A traceback pins the trial's frames (and their tensors); only a trial that ended normally is judged.
            leaked = self.report.leaked_bytes
            self.ledger.report(TRIAL_LEAK.finding(
                f"the trial left {leaked / 2**20:.1f} MiB of tensors alive after its model and optimizer were "
                f"released (tolerance {self.leak_tolerance / 2**20:.1f} MiB): keep loss.item() not loss, and drop "
                "caches or callbacks that hold tensors",
                subject=Subject(module=type(self.model).__name__),
                evidence={"leaked_bytes": leaked, "live_before": self.report.live_before,
                          "live_after": self.report.live_after, "tolerance": self.leak_tolerance}))

    def _release(self) -> None:
        for p in self.model.parameters():
            p.grad = None
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
            self.optimizer.state.clear()
        if self.release_weights:
            self.model.to_empty(device="meta")


def _cuda_allocated() -> int | None:
    import torch

    return int(torch.cuda.memory_allocated()) if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
