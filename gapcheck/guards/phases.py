"""The phases of a training step, what each costs, and what to do when one dominates.

One vocabulary for :func:`~gapcheck.guards.profiling.profile_steps` (plain timers around each phase)
and the pytest plugin (``torch.profiler`` events of a whole test, sorted into the same phases by
:func:`breakdown_from_events`). This module imports nothing heavy.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any


class Phase(str, Enum):
    DATA = "data"
    H2D = "h2d"
    FORWARD_BACKWARD = "forward_backward"
    OPTIMIZER = "optimizer"
    SYNC_WAIT = "sync_wait"
    OTHER = "other"

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def advice(self) -> str:
        return _ADVICE[self]


PHASES: tuple[Phase, ...] = tuple(Phase)

_LABELS = {
    Phase.DATA: "data loading",
    Phase.H2D: "host→device copy",
    Phase.FORWARD_BACKWARD: "forward/backward",
    Phase.OPTIMIZER: "optimizer",
    Phase.SYNC_WAIT: "sync wait",
    Phase.OTHER: "other (python, logging)",
}

_ADVICE = {
    Phase.DATA: "raise num_workers, use pin_memory, or decode faster",
    Phase.H2D: "use pin_memory=True with non_blocking copies, or send uint8 and normalize on the device",
    Phase.FORWARD_BACKWARD: "the step is compute-bound (as it should be); for more speed try mixed precision, "
                            "channels_last or torch.compile",
    Phase.OPTIMIZER: "use a foreach or fused optimizer (foreach=True / fused=True) or fewer parameter groups",
    Phase.SYNC_WAIT: "remove .item()/.cpu()/print of tensors inside the step; log every N steps",
    Phase.OTHER: "move logging, metrics and checkpointing out of the step, or do them every N steps",
}

def phase_shares(seconds: Mapping[Phase, float]) -> dict[Phase, float]:
    """Each phase's share of the total (0 for all when nothing was measured)."""
    total = sum(seconds.get(phase, 0.0) for phase in PHASES)
    return {phase: (seconds.get(phase, 0.0) / total if total > 0 else 0.0) for phase in PHASES}


def bottleneck_of(seconds: Mapping[Phase, float]) -> Phase:
    """The phase that took longest (the first in :data:`PHASES` on a tie)."""
    return max(PHASES, key=lambda phase: seconds.get(phase, 0.0))


def bottleneck_headline(seconds: Mapping[Phase, float]) -> str:
    """``"data loading is 62% of step time: raise num_workers, ..."``: the one sentence every profile leads with."""
    phase = bottleneck_of(seconds)
    return f"{phase.label} is {phase_shares(seconds)[phase]:.0%} of step time: {phase.advice}"


# torch.profiler names: DataLoader iterators and optimizers label themselves with record_function.
_DATA_PREFIX = "enumerate(DataLoader)#"
_OPTIMIZER_PREFIX = "Optimizer."
_SYNC_NAMES = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                         "aten::_local_scalar_dense", "cudaMemcpy"})
_H2D_DEVICE_PREFIX = "Memcpy HtoD"


def _own_phase(name: str) -> Phase | None:
    if name.startswith(_DATA_PREFIX):
        return Phase.DATA
    if name.startswith(_OPTIMIZER_PREFIX):
        return Phase.OPTIMIZER
    if name in _SYNC_NAMES:
        return Phase.SYNC_WAIT
    return None


def breakdown_from_events(events: Iterable[Any], wall_s: float) -> dict[Phase, float]:
    """Seconds per phase from ``torch.profiler`` FunctionEvents of a stretch of ``wall_s`` seconds.

    Each host event's self time goes to its own phase (by name) or its nearest labelled ancestor's, else
    forward/backward (every other op is compute); device copies named "Memcpy HtoD" count as the
    host→device copy; what no event covers is "other" (Python between ops). When threads overlap (a
    pin-memory thread) and the events add up to more than the wall time, they are scaled to fit it.
    """
    seconds = dict.fromkeys(PHASES, 0.0)
    memo: dict[int, Phase] = {}

    def phase_of(event: Any) -> Phase:
        key = id(event)
        if key not in memo:
            own = _own_phase(event.name)
            parent = getattr(event, "cpu_parent", None)
            memo[key] = own or (phase_of(parent) if parent is not None else Phase.FORWARD_BACKWARD)
        return memo[key]

    for event in events:
        if str(getattr(event, "device_type", "CPU")).endswith("CPU"):
            seconds[phase_of(event)] += event.self_cpu_time_total / 1e6
        elif event.name.startswith(_H2D_DEVICE_PREFIX):
            seconds[Phase.H2D] += getattr(event, "device_time_total", 0.0) / 1e6
    covered = sum(seconds.values())
    if covered > wall_s > 0:
        seconds = {phase: value * wall_s / covered for phase, value in seconds.items()}
    else:
        seconds[Phase.OTHER] += max(0.0, wall_s - covered)
    return seconds
